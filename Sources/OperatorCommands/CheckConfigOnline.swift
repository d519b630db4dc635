import AppStore
import FCM
import FoundationEssentials
import HTTP
import JSON
import Logging
import Metrics
import Postgres
import Schema
import TextSupport
import WorkerConfig

/// One `check-config --online` line: ok, or what went wrong.
struct OnlineCheck: Sendable, Equatable {
    var check: String
    var ok: Bool
    /// One line: libpq's and libcurl's multi-line messages are folded (every line break: CR LF is one Character, equal to
    /// neither "\r" nor "\n", and a peer's message may carry it).
    var detail: String

    init(check: String, ok: Bool, detail: String) {
        self.check = check
        self.ok = ok
        self.detail = detail.split(whereSeparator: { $0.isNewline || $0 == "\t" })
            .map { String($0).trimmingWhitespace() }.filter { !$0.isEmpty }.joined(separator: " ")
    }
}

/// The checks of `check-config --online`, each reaching one thing `run` depends on, each reported (never thrown).
enum OnlineChecks {
    static func run(_ startup: StartupConfiguration) async -> [OnlineCheck] {
        var checks = [await database(startup.configuration)]
        checks += await fcm(startup.serviceAccount, configuration: startup.configuration)
        if let appStore = startup.appStore { checks.append(await appStoreAPI(appStore)) }
        return checks
    }

    // MARK: database

    /// The table privileges the daemon's loops use, as `sql/roles.sql` grants them (and nothing more).
    static let requiredPrivileges: [(table: String, privileges: [String])] = [
        ("Patient", ["SELECT"]),
        ("CaregiverPatientLink", ["SELECT"]),
        ("PushDevice", ["SELECT", "UPDATE"]),
        ("PushDelivery", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("CaregiverEntitlement", ["SELECT", "UPDATE"]),
        ("PushOutbox", ["SELECT", "UPDATE", "DELETE"]),
        ("_medication_worker_migrations", ["SELECT"]),
        ("_medication_worker_leases", ["SELECT", "INSERT", "UPDATE"]),
        ("AppStoreNotificationCheckpoint", ["SELECT", "INSERT", "UPDATE"]),
        ("PushDeviceDisabled", ["SELECT", "INSERT", "UPDATE"]),
        ("_medication_worker_instances", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
    ]

    /// The privileges of `requiredPrivileges` that `sql/roles.sql` grants on columns only ("table privilege" → the
    /// columns): the daemon reads a patient's id and name, and writes only a device's "isEnabled" and "updatedAt".
    static let columnPrivileges: [String: [String]] = [
        "Patient SELECT": ["id", "displayName"],
        "PushDevice UPDATE": ["isEnabled", "updatedAt"],
    ]

    /// Each (table, privilege) of `requiredPrivileges` with whether the table exists and `current_user` holds the privilege
    /// (on every column of `columnPrivileges` where the grant is per column).
    static var privilegeQuery: PostgresQuery {
        let pairs = requiredPrivileges.flatMap { entry in entry.privileges.map { (table: entry.table, privilege: $0) } }
        let tables = pairs.map(\.table), privileges = pairs.map(\.privilege)
        let columns = pairs.map { (columnPrivileges["\($0.table) \($0.privilege)"] ?? []).joined(separator: ",") }
        return """
            SELECT t.name, t.privilege, to_regclass(quote_ident(t.name)) IS NOT NULL AS present,
                   COALESCE(CASE WHEN t.columns = '' THEN has_table_privilege(current_user, to_regclass(quote_ident(t.name)), t.privilege)
                                 ELSE (SELECT bool_and(has_column_privilege(current_user, to_regclass(quote_ident(t.name)), c, t.privilege))
                                       FROM unnest(string_to_array(t.columns, ',')) AS c) END, false) AS granted
            FROM unnest(\(tables)::text[], \(privileges)::text[], \(columns)::text[]) WITH ORDINALITY AS t(name, privilege, columns, n)
            ORDER BY t.n
            """
    }

    /// The role and database the connection uses.
    static let whoQuery: PostgresQuery = "SELECT current_user AS role, current_database() AS db"

    /// Connects with `DATABASE_URL`; the schema must be current and the role must hold every privilege the daemon uses.
    static func database(_ configuration: Configuration) async -> OnlineCheck {
        let client = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 1,
                                    settings: .worker(statementTimeout: configuration.databaseStatementTimeout, lockTimeout: .seconds(5),
                                                      asynchronousCommit: false))
        let outcome: Result<OnlineCheck, any Error>
        do {
            outcome = .success(try await client.withConnection { connection in try databaseVerdict(connection) })
        } catch {
            outcome = .failure(error)
        }
        await client.close()
        switch outcome {
        case .success(let check): return check
        case .failure(let error): return OnlineCheck(check: "database", ok: false, detail: "cannot connect or query: \(error)")
        }
    }

    static func databaseVerdict(_ connection: PostgresConnection) throws -> OnlineCheck {
        let who = try connection.query(whoQuery)
        let role = try who.first?["role"].string() ?? "?"
        let database = try who.first?["db"].string() ?? "?"
        var absent: [String] = []
        var missing: [String] = []
        for row in try connection.query(privilegeQuery) {
            let table = try row["name"].string()
            if try !row["present"].bool() {
                if !absent.contains(table) { absent.append(table) }
            } else if try !row["granted"].bool() {
                missing.append("\(try row["privilege"].string()) on \"\(table)\"")
            }
        }
        var problems: [String] = []
        if !absent.isEmpty {
            problems.append("tables missing: \(absent.map { "\"\($0)\"" }.joined(separator: ", ")) (run `medication-worker migrate`)")
        }
        if !missing.isEmpty {
            problems.append("role \(role) lacks \(missing.joined(separator: ", ")) (apply sql/roles.sql as the owner)")
        }
        // The schema version table is readable only with its SELECT; without it the line above already says so.
        var version = ""
        if !absent.contains("_medication_worker_migrations"), !missing.contains("SELECT on \"_medication_worker_migrations\"") {
            let notApplied = try Migrator.missingVersions(connection)
            if notApplied.isEmpty {
                version = "schema current (version \(try Migrator.currentVersion(connection).map(String.init) ?? "?"))"
            } else {
                problems.append("schema versions \(notApplied.map(String.init).joined(separator: ", ")) not applied (run `medication-worker migrate`)")
            }
        }
        guard problems.isEmpty else {
            return OnlineCheck(check: "database", ok: false, detail: "\(database) as \(role): " + problems.joined(separator: "; "))
        }
        return OnlineCheck(check: "database", ok: true, detail: "\(database) as \(role): \(version), every privilege the daemon uses granted")
    }

    // MARK: FCM

    /// A device token of FCM's shape that belongs to no device: FCM checks the message and refuses (or, with
    /// `validate_only`, merely validates) it, so the dry run reaches no phone.
    static let fakeDeviceToken = "medication-worker-check-config:APA91b" + String(repeating: "0", count: 120)

    /// An access token from the service account's `token_uri`, then a `validate_only` send with it.
    static func fcm(_ account: ServiceAccount, configuration: Configuration) async -> [OnlineCheck] {
        let http: HTTPClient
        do {
            http = try HTTPClient(configuration: HTTPClientConfiguration(maxInFlight: 2, connectTimeout: .seconds(10),
                                                                         requestTimeout: .seconds(15), caFile: configuration.tlsCAFile))
        } catch {
            return [OnlineCheck(check: "oauth_token", ok: false, detail: "cannot start the HTTP client: \(error)"),
                    OnlineCheck(check: "fcm", ok: false, detail: "not tried: no HTTP client")]
        }
        defer { http.shutdown() }
        // The provider's own error log would repeat what the line below says.
        let tokens = AccessTokenProvider(account: account, http: http, metrics: MetricsRegistry(),
                                         logger: Logger(label: "check-config", logLevel: .critical, sink: DiscardingSink()))
        let token: String
        do {
            token = try await tokens.token()
        } catch {
            return [OnlineCheck(check: "oauth_token", ok: false, detail: "\(error)"),
                    OnlineCheck(check: "fcm", ok: false, detail: "not tried: no access token")]
        }
        let tokenCheck = OnlineCheck(check: "oauth_token", ok: true, detail: "\(account.tokenURI) issued a token to \(account.clientEmail)")
        let url = "\(configuration.fcmBaseURL)/v1/projects/\(account.projectId)/messages:send"
        let body = JSONValue.object([
            "validate_only": .bool(true),
            "message": .object(["token": .string(fakeDeviceToken), "data": .object(["check": .string("medication-worker check-config --online")])]),
        ])
        let response: HTTPResponse
        do {
            response = try await http.execute(HTTPRequest(method: .post, url: url,
                                                          headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json; charset=UTF-8"],
                                                          body: Array(body.serialized.utf8), timeout: .seconds(15)))
        } catch {
            return [tokenCheck, OnlineCheck(check: "fcm", ok: false, detail: "cannot reach \(url): \(error)")]
        }
        let verdict = dryRunVerdict(status: response.status, body: response.body)
        return [tokenCheck, OnlineCheck(check: "fcm", ok: verdict.ok, detail: "project \(account.projectId): \(verdict.detail)")]
    }

    /// Whether FCM's answer to the dry run proves the key and project work: a 200, or a refusal of the fake device token
    /// (400 INVALID_ARGUMENT, 404 UNREGISTERED). Anything else (403 SENDER_ID_MISMATCH or PERMISSION_DENIED, 401, an
    /// answer that is not Google's JSON) is an error naming what came back.
    static func dryRunVerdict(status: Int, body: [UInt8]) -> (ok: Bool, detail: String) {
        let object = JSONValue.parse(bytes: body)
        if status == 200 {
            guard let name = object?["name"]?.stringValue else { return (false, "answered 200 without a message name: not FCM (is FCM_BASE_URL right?)") }
            return (true, "FCM validated a dry-run message (\(name.prefix(120))); nothing was delivered")
        }
        guard let error = object?["error"], let googleStatus = error["status"]?.stringValue else {
            return (false, "answered HTTP \(status) that is not an FCM error (is FCM_BASE_URL right?)")
        }
        let fcmCode = error["details"]?.arrayValue?.lazy.compactMap { $0["errorCode"]?.stringValue }.first
        let said = "\(status) \(googleStatus)\(fcmCode.map { " \($0)" } ?? ""): \((error["message"]?.stringValue ?? "").prefix(200))"
        if (status == 400 && googleStatus == "INVALID_ARGUMENT") || (status == 404 && fcmCode == "UNREGISTERED") {
            return (true, "FCM accepted the credentials and refused only the check's fake device token (\(said))")
        }
        return (false, "FCM answered \(said)")
    }

    // MARK: App Store

    /// A transaction id of Apple's shape that names no purchase: Apple answers 404 (4040010) once the key is accepted.
    static let unknownTransactionId = "2000000000000000"

    /// One authenticated Get Transaction Info request in production: 404 proves the key, issuer and bundle are accepted.
    static func appStoreAPI(_ appStore: AppStoreConfiguration) async -> OnlineCheck {
        let identity = "key \(appStore.keyId), issuer \(appStore.issuerId), bundle \(appStore.bundleId)"
        let http: HTTPClient
        do { http = try HTTPClient(configuration: appStore.http) } catch {
            return OnlineCheck(check: "app_store", ok: false, detail: "cannot start the HTTP client: \(error)")
        }
        defer { http.shutdown() }
        let answer = await AppStoreClient(configuration: appStore, http: http).transaction(id: unknownTransactionId, environment: .production)
        let url = appStore.productionURL
        switch answer {
        case .notFound(let code):
            return OnlineCheck(check: "app_store", ok: true,
                               detail: "\(url) accepted \(identity) (an unknown transaction: 404\(code.map { " \($0)" } ?? ""))")
        case .signedTransaction, .invalidRequest:
            return OnlineCheck(check: "app_store", ok: true, detail: "\(url) accepted \(identity)")
        case .unauthorized:
            return OnlineCheck(check: "app_store", ok: false,
                               detail: "\(url) answered 401: Apple refuses \(identity) (check APPSTORE_KEY_ID, APPSTORE_ISSUER_ID, APPSTORE_BUNDLE_ID and the .p8)")
        case .rateLimited:
            return OnlineCheck(check: "app_store", ok: false, detail: "\(url) answered 429 (rate limited): try again shortly")
        case .serverError(let status):
            return OnlineCheck(check: "app_store", ok: false, detail: "\(url) answered HTTP \(status)")
        case .transportError(let message):
            return OnlineCheck(check: "app_store", ok: false, detail: "cannot reach \(url): \(message)")
        }
    }
}

/// Drops every entry: a command reports its checks itself.
struct DiscardingSink: LogSink {
    func write(_ entry: LogEntry) {}
}
