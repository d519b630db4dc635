import FCMEmulator
import Foundation
import JSON
@testable import OperatorCommands
import Postgres
import Testing
import TestSupport
import WorkerApp

/// `check-config` (issue 32): it rejects everything `run` rejects, names every bad setting, warns about near-miss names,
/// shows the FCM project, never prints a secret; `--online` reaches the database, OAuth, FCM and reports each.
@Suite("check-config", .blockingFixtures)
struct CheckConfigTests {
    /// A check's detail is one line whatever the peer's message holds: CR LF (one Character in Swift, equal to neither
    /// "\r" nor "\n"), a lone CR, U+2028.
    @Test func onlineCheckDetail_foldsEveryLineBreak() {
        #expect(OnlineCheck(check: "fcm", ok: false, detail: "denied\r\nfcm ok: forged").detail == "denied fcm ok: forged")
        #expect(OnlineCheck(check: "fcm", ok: false, detail: "a\rb\u{2028}c\n\td").detail == "a b c d")
    }

    static let fixtures = TLSFixtures.shared
    static let databasePassword = "s3cret-db-pass"

    /// Credential files made once per test process: a service account's RSA key, an App Store P-256 key, a DER root.
    struct Files: Sendable {
        let rsaPrivatePEM: String
        let rsaPublicPEM: String
        let rsaKeyFile: String
        let ecKeyFile: String
        let derRootFile: String
    }

    static let files: Files = {
        do {
            let directory = fixtures.directory
            let rsa = try fixtures.rsaKeyPair(name: "check-config-rsa")
            let rsaKeyFile = "\(directory)/check-config-rsa.key"
            let ecKeyFile = "\(directory)/check-config-appstore.p8"
            try TLSFixtures.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", ecKeyFile])
            let derRootFile = "\(directory)/check-config-root.der"
            try TLSFixtures.openssl(["x509", "-in", fixtures.caFile, "-outform", "DER", "-out", derRootFile])
            return Files(rsaPrivatePEM: rsa.privatePEM, rsaPublicPEM: rsa.publicPEM, rsaKeyFile: rsaKeyFile, ecKeyFile: ecKeyFile,
                         derRootFile: derRootFile)
        } catch { fatalError("cannot make check-config fixtures: \(error)") }
    }()

    /// A service-account JSON without the fields `removing`, with `setting` changed.
    static func serviceAccount(removing: [String] = [], setting: [String: String] = [:],
                               tokenURI: String = "https://127.0.0.1:1/token") throws -> String {
        var object: [String: Any] = [
            "type": "service_account", "project_id": "pill-project", "private_key_id": "kid-1", "private_key": files.rsaPrivatePEM,
            "client_email": "worker@pill-project.iam.gserviceaccount.com", "token_uri": tokenURI,
        ]
        for (name, value) in setting { object[name] = value }
        for name in removing { object[name] = nil }
        let path = "\(fixtures.directory)/sa-\(UUID().uuidString).json"
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Settings that load: a service account, the App Store with a P-256 key and a PEM and a DER root.
    static func validEnvironment() throws -> [String: String] {
        [
            "DATABASE_URL": "postgresql://worker:\(databasePassword)@127.0.0.1:1/app",
            "FCM_SERVICE_ACCOUNT_FILE": try serviceAccount(),
            "APPSTORE_ISSUER_ID": "issuer-1", "APPSTORE_KEY_ID": "KEY123", "APPSTORE_BUNDLE_ID": "jp.example.pill",
            "APPSTORE_PRIVATE_KEY_FILE": files.ecKeyFile,
            "APPSTORE_ROOT_CERT_FILES": "\(fixtures.caFile),\(files.derRootFile)",
        ]
    }

    static func checkConfig(_ environment: [String: String], _ arguments: String...) async -> CommandRunner.Result {
        await CommandRunner.execute(CheckConfigCommand.self, arguments: arguments, environment: environment)
    }

    static func checkConfigJSON(_ environment: [String: String], _ arguments: String...) async throws -> (status: Int32, json: JSONValue) {
        let result = await CommandRunner.execute(CheckConfigCommand.self, arguments: arguments + ["--json"], environment: environment)
        guard let json = JSONValue.parse(result.output) else { throw TestSupportError("not JSON: \(result.output) \(result.errorOutput)") }
        return (result.status, json)
    }

    /// The `(setting, problem)` pairs of the JSON's `errors`.
    static func errors(_ json: JSONValue) -> [(setting: String, problem: String)] {
        (json["errors"]?.arrayValue ?? []).map { ($0["setting"]?.stringValue ?? "", $0["problem"]?.stringValue ?? "") }
    }

    // MARK: offline

    @Test func validConfiguration_printsSettingsProjectAndOK() async throws {
        let result = await Self.checkConfig(try Self.validEnvironment())
        #expect(result.status == 0, "\(result.errorOutput)")
        #expect(result.output.contains("FCM project pill-project, service account worker@pill-project.iam.gserviceaccount.com"))
        #expect(result.output.contains("App Store key KEY123, issuer issuer-1, bundle jp.example.pill"))
        #expect(result.output.contains("MAX_IN_FLIGHT=1200"))
        #expect(result.output.hasSuffix("configuration OK"))
        #expect(result.errorOutput.isEmpty)

        let (status, json) = try await Self.checkConfigJSON(try Self.validEnvironment())
        #expect(status == 0)
        #expect(json["ok"]?.boolValue == true)
        #expect(json["fcm"]?["projectId"]?.stringValue == "pill-project")
        #expect(json["fcm"]?["clientEmail"]?.stringValue == "worker@pill-project.iam.gserviceaccount.com")
        #expect(json["appStore"]?["keyId"]?.stringValue == "KEY123")
        #expect(json["settings"]?["BATCH_SIZE"]?.stringValue == "100")
        #expect(json["errors"]?.arrayValue?.isEmpty == true)
        #expect(json["online"] == nil)
    }

    @Test func serviceAccountWithoutPrivateKey_exits78NamingIt() async throws {
        var environment = try Self.validEnvironment()
        environment["FCM_SERVICE_ACCOUNT_FILE"] = try Self.serviceAccount(removing: ["private_key"])
        let result = await Self.checkConfig(environment)
        #expect(result.status == 78)
        #expect(result.output.isEmpty)
        #expect(result.errorOutput.contains("FCM_SERVICE_ACCOUNT_FILE"))
        #expect(result.errorOutput.contains("\"private_key\" is missing"))
        let (status, json) = try await Self.checkConfigJSON(environment)
        #expect(status == 78)
        #expect(json["ok"]?.boolValue == false)
        #expect(Self.errors(json).map(\.setting) == ["FCM_SERVICE_ACCOUNT_FILE"])
    }

    /// Issue 45: the signed assertion and the access token it buys travel to `token_uri`: https, or http to loopback only.
    @Test func tokenURIOverPlainHTTP_exits78NamingIt_butLoopbackHTTPIsAccepted() async throws {
        var environment = try Self.validEnvironment()
        environment["FCM_SERVICE_ACCOUNT_FILE"] = try Self.serviceAccount(tokenURI: "http://oauth2.example.com/token")
        let result = await Self.checkConfig(environment)
        #expect(result.status == 78)
        #expect(result.errorOutput.contains("FCM_SERVICE_ACCOUNT_FILE"))
        #expect(result.errorOutput.contains(#"field "token_uri" must be an https URL (plain http only to a loopback address), got http://oauth2.example.com"#),
                "\(result.errorOutput)")
        for loopback in ["http://127.0.0.1:8089/token", "http://localhost:8089/token", "http://[::1]:8089/token"] {
            environment["FCM_SERVICE_ACCOUNT_FILE"] = try Self.serviceAccount(tokenURI: loopback)
            let accepted = await Self.checkConfig(environment)
            #expect(accepted.status == 0, "\(loopback): \(accepted.errorOutput)")
        }
    }

    /// Issue 45: a database off this machine reached without verify-full or verify-ca is warned about (libpq's default
    /// `prefer` verifies nothing and falls back to plain text); a local socket, loopback and verify-full are not.
    @Test func databaseReachedWithoutCertificateVerification_isWarnedAbout() async throws {
        var environment = try Self.validEnvironment()
        environment["DATABASE_URL"] = "postgresql://worker:pw@db.internal:5432/app?sslmode=require"
        environment["DATABASE_LISTEN_URL"] = "host=db-direct.internal dbname=app user=worker"
        let result = await Self.checkConfig(environment)
        #expect(result.status == 0, "\(result.errorOutput)")
        #expect(result.output.contains("warning: DATABASE_URL reaches db.internal with sslmode=require, which does not verify the server's certificate: "
                                       + "use sslmode=verify-full with sslrootcert=<the server's CA file>"), "\(result.output)")
        #expect(result.output.contains("warning: DATABASE_LISTEN_URL reaches db-direct.internal with sslmode=prefer"), "\(result.output)")
        let (_, json) = try await Self.checkConfigJSON(environment)
        #expect(json["warnings"]?.arrayValue?.contains { $0.stringValue?.hasPrefix("DATABASE_URL reaches db.internal") == true } == true)
        for url in ["postgresql://worker:pw@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
                    "host=db.internal sslmode=verify-ca sslrootcert=/etc/ssl/db-ca.pem", "host=/run/postgresql dbname=app",
                    "postgresql://worker@localhost/app", "host=127.0.0.1 dbname=app"] {
            environment["DATABASE_URL"] = url
            environment["DATABASE_LISTEN_URL"] = nil
            let quiet = await Self.checkConfig(environment)
            #expect(quiet.status == 0 && !quiet.output.contains("warning: DATABASE_URL"), "\(url): \(quiet.output)")
        }
    }

    /// Issue 54: the host may come from `PGHOST` or from the string's `service=` (a pg_service.conf section), as libpq
    /// takes it; the warning names that host and the sslmode libpq would use.
    @Test func hostFromPGHOSTOrAService_isWarnedAboutToo() async throws {
        var environment = try Self.validEnvironment()
        environment["DATABASE_URL"] = "dbname=app user=worker"
        environment["PGHOST"] = "db-env.internal"
        let fromEnvironment = await Self.checkConfig(environment)
        #expect(fromEnvironment.output.contains("warning: DATABASE_URL reaches db-env.internal with sslmode=prefer"), "\(fromEnvironment.output)")

        let services = try TestBinaries.temporaryFile("""
            [other]
            host=db-other.internal
            [pill]
            # the primary
            host = db-svc.internal
            sslmode=require
            [pill-verified]
            host=db-svc.internal
            sslmode=verify-full
            """, suffix: ".conf")
        environment["PGSERVICEFILE"] = services
        environment["DATABASE_URL"] = "service=pill dbname=app"
        let fromService = await Self.checkConfig(environment)
        #expect(fromService.output.contains("warning: DATABASE_URL reaches db-svc.internal with sslmode=require"), "\(fromService.output)")
        environment["DATABASE_URL"] = "postgresql:///app?service=pill-verified"
        let verified = await Self.checkConfig(environment)
        #expect(verified.status == 0 && !verified.output.contains("warning: DATABASE_URL"), "\(verified.output)")
    }

    @Test func privateKeyThatIsNotAKey_exits78WithoutEchoingIt() async throws {
        var environment = try Self.validEnvironment()
        let garbage = "-----BEGIN PRIVATE KEY-----\nTm90QUtleUF0QWxsU2VjcmV0Qnl0ZXM=\n-----END PRIVATE KEY-----\n"
        environment["FCM_SERVICE_ACCOUNT_FILE"] = try Self.serviceAccount(setting: ["private_key": garbage])
        let result = await Self.checkConfig(environment)
        #expect(result.status == 78)
        #expect(result.errorOutput.contains("FCM_SERVICE_ACCOUNT_FILE"))
        #expect(result.errorOutput.contains("\"private_key\" is not a PEM private key"))
        #expect(!result.errorOutput.contains("Tm90QUtleUF0"))
    }

    @Test func rsaKeyAsTheAppStoreP8_exits78NamingIt() async throws {
        var environment = try Self.validEnvironment()
        environment["APPSTORE_PRIVATE_KEY_FILE"] = Self.files.rsaKeyFile
        let result = await Self.checkConfig(environment)
        #expect(result.status == 78)
        #expect(result.errorOutput.contains("APPSTORE_PRIVATE_KEY_FILE"))
        #expect(result.errorOutput.contains("RSA"))
    }

    @Test func rootFileThatIsNotACertificate_exits78NamingIt() async throws {
        var environment = try Self.validEnvironment()
        let notACertificate = try TestBinaries.temporaryFile("this is not a certificate\n", suffix: ".cer")
        environment["APPSTORE_ROOT_CERT_FILES"] = "\(Self.fixtures.caFile),\(notACertificate)"
        let result = await Self.checkConfig(environment)
        #expect(result.status == 78)
        #expect(result.errorOutput.contains("APPSTORE_ROOT_CERT_FILES"))
        #expect(result.errorOutput.contains(notACertificate))
        #expect(!result.errorOutput.contains(Self.fixtures.caFile + " is not"))
    }

    @Test func severalBadSettings_areAllNamedInTextAndJSON() async throws {
        var environment = try Self.validEnvironment()
        environment["BATCH_SIZE"] = "ten"
        environment["LOG_LEVEL"] = "verbose"
        environment["FCM_SERVICE_ACCOUNT_FILE"] = try Self.serviceAccount(removing: ["private_key", "project_id"])
        environment["APPSTORE_PRIVATE_KEY_FILE"] = Self.files.rsaKeyFile
        environment["APPSTORE_ROOT_CERT_FILES"] = try TestBinaries.temporaryFile("nope", suffix: ".pem")
        environment["MAX_INFLIGHT"] = "5"
        let expected: Set = ["BATCH_SIZE", "LOG_LEVEL", "FCM_SERVICE_ACCOUNT_FILE", "APPSTORE_PRIVATE_KEY_FILE", "APPSTORE_ROOT_CERT_FILES"]

        let result = await Self.checkConfig(environment)
        #expect(result.status == 78)
        for setting in expected { #expect(result.errorOutput.contains(setting), "\(setting) not named: \(result.errorOutput)") }
        #expect(result.errorOutput.contains("project_id") && result.errorOutput.contains("private_key"))
        // The near-miss may be why a setting looks unset: it is shown beside the errors.
        #expect(result.errorOutput.contains("MAX_INFLIGHT is not a setting; did you mean MAX_IN_FLIGHT?"))

        let (status, json) = try await Self.checkConfigJSON(environment)
        #expect(status == 78)
        #expect(json["ok"]?.boolValue == false)
        let errors = Self.errors(json)
        #expect(Set(errors.map(\.setting)) == expected)
        #expect(errors.count == 6)  // two fields of the service account
        #expect(errors.allSatisfy { !$0.problem.isEmpty })
        #expect(json["warnings"]?.arrayValue?.count == 1)
    }

    /// A copy of `path` with `padding` newlines or spaces after its content: still a valid key, certificate or JSON, only
    /// larger.
    static func padded(_ path: String, to size: Int, with padding: Character = "\n") throws -> String {
        let content = try String(contentsOfFile: path, encoding: .utf8)
        let copy = "\(fixtures.directory)/padded-\(UUID().uuidString)-\((path as NSString).lastPathComponent)"
        try (content + String(repeating: padding, count: size - content.utf8.count)).write(toFile: copy, atomically: true, encoding: .utf8)
        return copy
    }

    /// Issue 54: every file read whole into memory has a cap: the service account (64 KiB), the App Store key (64 KiB),
    /// each root certificate and TLS_CA_FILE (1 MiB). A larger one, valid or not, is refused naming its setting, exit 78,
    /// and `run` refuses what check-config refuses.
    @Test func oversizedCredentialAndCertificateFiles_exit78NamingEachSetting() async throws {
        var environment = try Self.validEnvironment()
        let account = try Self.padded(try Self.serviceAccount(), to: 64 * 1024 + 1, with: " ")
        let key = try Self.padded(Self.files.ecKeyFile, to: 64 * 1024 + 1)
        let root = try Self.padded(Self.fixtures.caFile, to: 1024 * 1024 + 1)
        let caFile = try Self.padded(Self.fixtures.caFile, to: 1024 * 1024 + 1)
        environment["FCM_SERVICE_ACCOUNT_FILE"] = account
        environment["APPSTORE_PRIVATE_KEY_FILE"] = key
        environment["APPSTORE_ROOT_CERT_FILES"] = "\(Self.files.derRootFile),\(root)"
        environment["TLS_CA_FILE"] = caFile
        let expected = [
            "FCM_SERVICE_ACCOUNT_FILE: \(account) is larger than 64 KiB (a Google service account key is about 2.3 KB): not read",
            "APPSTORE_PRIVATE_KEY_FILE: \(key) is larger than 64 KiB (an App Store .p8 key is about 250 bytes): not read",
            "APPSTORE_ROOT_CERT_FILES: \(root) is larger than 1 MiB (an Apple root certificate is about 1 KB): not read",
            "TLS_CA_FILE: \(caFile) is larger than 1 MiB (a CA certificate is a few KB, a whole bundle a few hundred KB): not read",
        ]
        let result = await Self.checkConfig(environment)
        #expect(result.status == 78)
        #expect(result.output.isEmpty)
        for line in expected { #expect(result.errorOutput.contains(line), "\(line) not in: \(result.errorOutput)") }
        let (status, json) = try await Self.checkConfigJSON(environment)
        #expect(status == 78)
        #expect(Set(Self.errors(json).map(\.setting))
                == ["FCM_SERVICE_ACCOUNT_FILE", "APPSTORE_PRIVATE_KEY_FILE", "APPSTORE_ROOT_CERT_FILES", "TLS_CA_FILE"])
        #expect(Self.errors(json).allSatisfy { $0.problem.contains("is larger than") }, "\(Self.errors(json))")

        // A bad BATCH_SIZE too, so that a `run` that read the files whole would still stop (78) instead of waiting for
        // the database: the caps must be what it names.
        environment["BATCH_SIZE"] = "0"
        let run = try await TestBinaries.run("medication-worker", ["run"], environment: environment)
        #expect(run.status == 78)
        for line in expected { #expect(run.stderr.contains(line), "\(line) not in: \(run.stderr)") }
    }

    /// The caps are limits, not sizes to avoid: a file of exactly the cap loads.
    @Test func credentialAndCertificateFilesOfExactlyTheCap_load() async throws {
        var environment = try Self.validEnvironment()
        environment["FCM_SERVICE_ACCOUNT_FILE"] = try Self.padded(try Self.serviceAccount(), to: 64 * 1024, with: " ")
        environment["APPSTORE_PRIVATE_KEY_FILE"] = try Self.padded(Self.files.ecKeyFile, to: 64 * 1024)
        environment["APPSTORE_ROOT_CERT_FILES"] = try Self.padded(Self.fixtures.caFile, to: 1024 * 1024)
        environment["TLS_CA_FILE"] = try Self.padded(Self.fixtures.caFile, to: 1024 * 1024)
        let result = await Self.checkConfig(environment)
        #expect(result.status == 0, "\(result.errorOutput)")
        #expect(result.output.contains("FCM project pill-project"))
    }

    @Test func misspeltSetting_isWarnedWithTheSuggestion_andChangesNoStatus() async throws {
        var environment = try Self.validEnvironment()
        environment["MAX_INFLIGHT"] = "5"
        environment["FCM_BASEURL"] = "https://fcm.example"
        let result = await Self.checkConfig(environment)
        #expect(result.status == 0)
        #expect(result.output.contains("warning: MAX_INFLIGHT is not a setting; did you mean MAX_IN_FLIGHT?"))
        #expect(result.output.contains("warning: FCM_BASEURL is not a setting; did you mean FCM_BASE_URL?"))
        let (status, json) = try await Self.checkConfigJSON(environment)
        #expect(status == 0)
        #expect(json["warnings"]?.arrayValue?.compactMap(\.stringValue).contains("MAX_INFLIGHT is not a setting; did you mean MAX_IN_FLIGHT?") == true)
    }

    @Test func noSecretInAnyOutput() async throws {
        let environment = try Self.validEnvironment()
        // A line from the middle of each private key's base64 body.
        let pemLines = Self.files.rsaPrivatePEM.split(separator: "\n")
        let ecLines = try String(contentsOfFile: Self.files.ecKeyFile, encoding: .utf8).split(separator: "\n")
        let secrets = [Self.databasePassword, String(pemLines[pemLines.count / 2]), String(ecLines[1])]
        let text = await Self.checkConfig(environment)
        let json = await CommandRunner.execute(CheckConfigCommand.self, arguments: ["--json"], environment: environment)
        #expect(text.status == 0)
        #expect(text.output.contains("postgresql://worker:***@127.0.0.1:1/app"))
        for secret in secrets {
            for output in [text.output, text.errorOutput, json.output, json.errorOutput] { #expect(!output.contains(secret)) }
        }
    }

    /// Issue 54: a proxy password, with or without a scheme, is in neither check-config's text nor its `--json`.
    @Test(arguments: ["alice:S3cretProxyPw@squid.internal:3128", "http://alice:p@ssS3cretProxyPw@squid:3128"])
    func proxyPassword_isAbsentFromTextAndJSON(proxy: String) async throws {
        var environment = try Self.validEnvironment()
        environment["HTTPS_PROXY"] = proxy
        let text = await Self.checkConfig(environment)
        let json = await CommandRunner.execute(CheckConfigCommand.self, arguments: ["--json"], environment: environment)
        #expect(text.status == 0)
        #expect(text.output.contains("HTTPS_PROXY=\(proxy.hasPrefix("http://") ? "http://" : "")alice:***@squid"), "\(text.output)")
        #expect(JSONValue.parse(json.output)?["settings"]?["HTTPS_PROXY"]?.stringValue?.contains("alice:***@squid") == true, "\(json.output)")
        for output in [text.output, text.errorOutput, json.output, json.errorOutput] {
            #expect(!output.contains("S3cretProxyPw") && !output.contains("p@ss"), "\(output)")
        }
    }

    /// Issue 54: each setting that used to run on is refused by check-config and by `run` with exit 78 naming it, in
    /// text and JSON, without echoing the value's secret.
    @Test(arguments: [
        ("APPSTORE_NOTIFICATION_HISTORY", "maybe"),
        ("DATABASE_URL", "postgresql://worker:Zebra%zzS3cret@host/db"),
        ("DATABASE_STATEMENT_TIMEOUT", "30d"),
        ("SHUTDOWN_TIMEOUT", "20s"),
        ("DATABASE_LISTEN_URL", "postgresql://worker:Zebra%zzS3cret@host/db"),
    ])
    func settingThatRanOn_exits78NamingIt(variable: String, value: String) async throws {
        var environment = try Self.validEnvironment()
        for name in environment.keys where name.hasPrefix("APPSTORE_") { environment[name] = nil }  // the App Store is off
        environment[variable] = value
        let text = await Self.checkConfig(environment)
        #expect(text.status == 78)
        #expect(text.errorOutput.contains("\(variable): "), "\(text.errorOutput)")
        let json = await CommandRunner.execute(CheckConfigCommand.self, arguments: ["--json"], environment: environment)
        #expect(json.status == 78)
        #expect(JSONValue.parse(json.output).map(Self.errors)?.map(\.setting) == [variable], "\(json.output)")
        #expect(await WorkerApp.main(arguments: ["medication-worker", "run"], environment: environment) == 78)
        for output in [text.output, text.errorOutput, json.output, json.errorOutput] { #expect(!output.contains("S3cret"), "\(output)") }
    }

    /// `run` loads through the same `StartupConfiguration`: the key check-config rejects stops it too, before it touches anything.
    @Test func run_exits78ForTheKeyCheckConfigRejects() async throws {
        var environment = try Self.validEnvironment()
        environment["APPSTORE_PRIVATE_KEY_FILE"] = Self.files.rsaKeyFile
        environment["FCM_SERVICE_ACCOUNT_FILE"] = try Self.serviceAccount(removing: ["private_key"])
        #expect(await Self.checkConfig(environment).status == 78)
        #expect(await WorkerApp.main(arguments: ["medication-worker", "run"], environment: environment) == 78)
    }

    @Test func dryRunVerdicts_tellProofFromRefusal() {
        func verdict(_ status: Int, _ body: String) -> (ok: Bool, detail: String) {
            OnlineChecks.dryRunVerdict(status: status, body: Array(body.utf8))
        }
        #expect(verdict(200, #"{"name":"projects/p/messages/fake_message_id"}"#).ok)
        #expect(verdict(400, #"{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"The registration token is not a valid FCM registration token"}}"#).ok)
        #expect(verdict(404, #"{"error":{"code":404,"status":"NOT_FOUND","message":"x","details":[{"errorCode":"UNREGISTERED"}]}}"#).ok)
        let mismatch = verdict(403, #"{"error":{"code":403,"status":"PERMISSION_DENIED","message":"SenderId mismatch","details":[{"errorCode":"SENDER_ID_MISMATCH"}]}}"#)
        #expect(!mismatch.ok && mismatch.detail.contains("SENDER_ID_MISMATCH"))
        #expect(!verdict(401, #"{"error":{"code":401,"status":"UNAUTHENTICATED","message":"x"}}"#).ok)
        let html = verdict(404, "<html><body>Not Found</body></html>")
        #expect(!html.ok && html.detail.contains("FCM_BASE_URL"))
        #expect(!verdict(200, "<html></html>").ok)
    }

    // MARK: --online

    /// The database, the emulator (TLS, trusting the suite's CA) and a service account whose token_uri is the emulator's.
    static func withOnlineRig(_ body: (String, FCMEmulator, [String: String]) async throws -> Void) async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let emulator = try FCMEmulator(configuration: fixtures.emulatorConfiguration(assertionPublicKeyPEM: files.rsaPublicPEM))
            defer { emulator.stop() }
            let environment = [
                "DATABASE_URL": conninfo, "FCM_BASE_URL": emulator.baseURL, "TLS_CA_FILE": fixtures.caFile,
                "FCM_SERVICE_ACCOUNT_FILE": try serviceAccount(tokenURI: emulator.tokenURI),
            ]
            try await body(conninfo, emulator, environment)
        }
    }

    @Test func online_allChecksOkAgainstTheDatabaseAndTheEmulator() async throws {
        try await Self.withOnlineRig { _, emulator, environment in
            let result = await Self.checkConfig(environment, "--online")
            #expect(result.status == 0, "\(result.output)\n\(result.errorOutput)")
            #expect(result.output.contains("configuration OK"))
            let (status, json) = try await Self.checkConfigJSON(environment, "--online")
            #expect(status == 0)
            #expect(json["ok"]?.boolValue == true)
            let online = json["online"]?.arrayValue ?? []
            #expect(online.compactMap { $0["check"]?.stringValue } == ["database", "oauth_token", "fcm"])
            #expect(online.allSatisfy { $0["ok"]?.boolValue == true }, "\(online)")
            // validate_only: checked by FCM, delivered to no one.
            #expect(emulator.stats.sendsByOutcome["validate_only"] == 2)
            #expect(emulator.receivedMessages.isEmpty)
        }
    }

    /// The privileges the check asks for are exactly what `sql/roles.sql` grants: under that role the database line is ok.
    @Test func online_underTheRoleOfRolesSQL_databaseIsOk() async throws {
        try await Self.withOnlineRig { conninfo, _, environment in
            // roles.sql with a role of this test's own (roles are cluster-wide and other suites create `medication_worker`).
            let role = "cc_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            let rolesSQL = try String(contentsOf: root.appendingPathComponent("sql/roles.sql"), encoding: .utf8)
                .replacingOccurrences(of: "_medication_worker", with: "\u{1}")  // the worker's own tables keep their names
                .replacingOccurrences(of: "medication_worker", with: String(role))
                .replacingOccurrences(of: "\u{1}", with: "_medication_worker")
            let admin = try PostgresConnection(conninfo: conninfo)
            try admin.executeScript("\(unescaped: rolesSQL)")
            defer {
                _ = try? admin.query("DROP OWNED BY \(unescaped: role)")
                _ = try? admin.query("DROP ROLE IF EXISTS \(unescaped: role)")
            }
            var restricted = environment
            restricted["DATABASE_URL"] = conninfo + " user=\(role)"
            let result = await Self.checkConfig(restricted, "--online")
            #expect(result.status == 0, "\(result.output)\n\(result.errorOutput)")
            #expect(result.output.contains("database    ok: ") && result.output.contains("as \(role)"), "\(result.output)")
        }
    }

    @Test func online_fcmRefusingTheProject_exits1NamingIt() async throws {
        try await Self.withOnlineRig { _, emulator, environment in
            emulator.setProjectFault(.permissionDenied)
            let result = await Self.checkConfig(environment, "--online")
            #expect(result.status == 1)
            #expect(result.errorOutput.contains("online check failed: fcm"))
            let line = result.output.split(separator: "\n").first { $0.hasPrefix("fcm ") }.map(String.init) ?? ""
            #expect(line.contains("FAILED") && line.contains("403 PERMISSION_DENIED"), "\(result.output)")
            let (status, json) = try await Self.checkConfigJSON(environment, "--online")
            #expect(status == 1)
            #expect(json["ok"]?.boolValue == false)
            let fcm = json["online"]?.arrayValue?.first { $0["check"]?.stringValue == "fcm" }
            #expect(fcm?["ok"]?.boolValue == false)
            #expect(json["online"]?.arrayValue?.first { $0["check"]?.stringValue == "oauth_token" }?["ok"]?.boolValue == true)
        }
    }

    @Test func online_roleWithoutGrants_exits1NamingTheMissingPrivileges() async throws {
        try await Self.withOnlineRig { conninfo, _, environment in
            let role = "cc_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
            let admin = try PostgresConnection(conninfo: conninfo)
            try admin.query("CREATE ROLE \(unescaped: role) LOGIN")
            defer {
                _ = try? admin.query("DROP OWNED BY \(unescaped: role)")
                _ = try? admin.query("DROP ROLE IF EXISTS \(unescaped: role)")
            }
            // Everything but the outbox: the check names exactly what is missing.
            try admin.query("GRANT USAGE ON SCHEMA public TO \(unescaped: role)")
            for (table, privileges) in OnlineChecks.requiredPrivileges where table != "PushOutbox" {
                let quotedTable = PostgresConnection.quoteIdentifier(table)
                try admin.query("GRANT \(unescaped: privileges.joined(separator: ", ")) ON \(unescaped: quotedTable) TO \(unescaped: role)")
            }
            var restricted = environment
            restricted["DATABASE_URL"] = conninfo + " user=\(role)"
            let (status, json) = try await Self.checkConfigJSON(restricted, "--online")
            #expect(status == 1)
            let database = json["online"]?.arrayValue?.first { $0["check"]?.stringValue == "database" }
            #expect(database?["ok"]?.boolValue == false)
            let detail = database?["detail"]?.stringValue ?? ""
            #expect(detail.contains(#"SELECT on "PushOutbox""#) && detail.contains(#"DELETE on "PushOutbox""#), "\(detail)")
            #expect(!detail.contains("PushDelivery"))
        }
    }
}
