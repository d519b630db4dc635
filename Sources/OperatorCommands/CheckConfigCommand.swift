import FCM
import JSON
import Postgres
import WorkerConfig

/// `check-config`: loads and checks everything `run` would (the same `StartupConfiguration`), names every bad setting,
/// warns about near-miss variable names, and prints the effective configuration with secrets redacted. `--online` also
/// reaches the database, the OAuth token endpoint, FCM (a `validate_only` dry run) and the App Store API.
struct CheckConfigCommand: OperatorCommand {
    static let name = "check-config"
    static let summary = "Check the configuration as `run` would and print it, secrets redacted; --online reaches out too."
    static let help = """
        Usage: medication-worker check-config [--online] [--json]

        Loads and checks the configuration from the environment exactly as `run` does: every value's syntax, the FCM
        service account (JSON, type, project_id, client_email, an RSA private_key, token_uri), the App Store .p8 key
        (EC P-256) and every root certificate (PEM or DER). Prints the effective configuration with secrets redacted,
        the FCM project and client email, warnings about variables that look like a misspelt setting, then
        "configuration OK". Every bad setting is named (on stderr), with exit status 78.

        --online   After the offline checks pass, also check, one line each, ok or the error:
                   database     connects with DATABASE_URL; migrations current; the role's table privileges
                   oauth_token  an access token from the service account's token_uri
                   fcm          a validate_only dry-run send (reaches no phone) to FCM_BASE_URL
                   app_store    one authenticated App Store Server API request (when configured)
                   Exit status 1 when any of them fails.
        --json     One JSON document: {"ok", "settings", "fcm", "appStore", "warnings", "errors"[, "online"]}.
        """

    let online: Bool

    init(arguments: inout CommandArguments) throws(UsageError) {
        online = arguments.flag("--online")
    }

    /// One `NAME=value` line of the effective configuration.
    struct Setting: Sendable {
        var name: String
        var value: String
    }

    /// What the service account says about where pushes go.
    struct FCMIdentity: Sendable {
        var projectId: String
        var clientEmail: String
    }

    /// The App Store key's identity (the key itself is never shown).
    struct AppStoreIdentity: Sendable {
        var keyId: String
        var issuerId: String
        var bundleId: String
    }

    struct Report: CommandReport {
        /// The effective configuration, secrets redacted; empty when a setting is bad (it would not be effective).
        var settings: [Setting]
        var fcm: FCMIdentity?
        var appStore: AppStoreIdentity?
        var warnings: [String]
        var errors: [ConfigurationError]
        /// nil without `--online` (or when the offline checks failed and nothing was reached).
        var online: [OnlineCheck]?

        var ok: Bool { errors.isEmpty && (online ?? []).allSatisfy(\.ok) }

        var exitStatus: Int32 {
            if !errors.isEmpty { return ExitStatus.config }
            return ok ? ExitStatus.ok : ExitStatus.failure
        }

        /// On bad settings, nothing here (stdout stays empty): they are all on stderr.
        var text: String {
            guard errors.isEmpty else { return "" }
            var lines = settings.map { "\($0.name)=\($0.value)" }
            if let fcm { lines.append("FCM project \(fcm.projectId), service account \(fcm.clientEmail)") }
            if let appStore {
                lines.append("App Store key \(appStore.keyId), issuer \(appStore.issuerId), bundle \(appStore.bundleId)")
            }
            lines += warnings.map { "warning: \($0)" }
            lines.append("configuration OK")
            if let online {
                let width = online.map(\.check.count).max() ?? 0
                lines += online.map { "\($0.check.padding(toLength: width + 1))\($0.ok ? "ok" : "FAILED"): \($0.detail)" }
            }
            return lines.joined(separator: "\n")
        }

        var errorText: String {
            if !errors.isEmpty {
                return (["medication-worker: configuration error: \(ConfigurationErrors(errors))"] + warnings.map { "warning: \($0)" })
                    .joined(separator: "\n")
            }
            let failed = (online ?? []).filter { !$0.ok }.map(\.check)
            return failed.isEmpty ? "" : "medication-worker check-config: online check failed: \(failed.joined(separator: ", "))"
        }

        var json: JSONValue {
            var object: [String: JSONValue] = [
                "ok": .bool(ok),
                "settings": .object(Dictionary(settings.map { ($0.name, JSONValue.string($0.value)) }, uniquingKeysWith: { a, _ in a })),
                "fcm": fcm.map { .object(["projectId": .string($0.projectId), "clientEmail": .string($0.clientEmail)]) } ?? .null,
                "appStore": appStore.map {
                    .object(["keyId": .string($0.keyId), "issuerId": .string($0.issuerId), "bundleId": .string($0.bundleId)])
                } ?? .null,
                "warnings": .array(warnings.map(JSONValue.string)),
                "errors": .array(errors.map { .object(["setting": .string($0.variable), "problem": .string($0.problem)]) }),
            ]
            if let online {
                object["online"] = .array(online.map {
                    .object(["check": .string($0.check), "ok": .bool($0.ok), "detail": .string($0.detail)])
                })
            }
            return .object(object)
        }
    }

    /// The verifying sslmodes: with anything else (libpq's default `prefer` included) a server on the network is not
    /// authenticated, and `prefer`/`allow` fall back to plain text when an attacker refuses TLS.
    static let verifyingSSLModes: Set<String> = ["verify-full", "verify-ca"]

    /// A warning for each database URL that reaches a host off this machine without verifying its certificate.
    static func unverifiedDatabaseWarnings(_ configuration: Configuration, environment: [String: String]) -> [String] {
        [("DATABASE_URL", configuration.databaseURL), ("DATABASE_LISTEN_URL", configuration.databaseListenURL)].compactMap { name, url in
            guard let url, let given = ConninfoParameters.parse(url) else { return nil }
            // What libpq uses: the string, then its service= (or PGSERVICE), then PGHOST, PGHOSTADDR and PGSSLMODE.
            let parameters = ConninfoParameters.effective(given, environment: environment)
            let remote = ConninfoParameters.hosts(parameters).filter { !ConninfoParameters.isLocal($0) }
            let mode = parameters["sslmode"] ?? "prefer"
            guard let host = remote.first, !verifyingSSLModes.contains(mode) else { return nil }
            return "\(name) reaches \(host) with sslmode=\(mode), which does not verify the server's certificate: "
                + "use sslmode=verify-full with sslrootcert=<the server's CA file>"
        }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        let check = StartupConfiguration.check(context.environment)
        var report = Report(settings: [], fcm: check.serviceAccount.map { FCMIdentity(projectId: $0.projectId, clientEmail: $0.clientEmail) },
                            appStore: check.appStore.map { AppStoreIdentity(keyId: $0.keyId, issuerId: $0.issuerId, bundleId: $0.bundleId) },
                            warnings: check.warnings.map(\.description), errors: check.errors, online: nil)
        guard let startup = check.loaded else { return report }
        report.warnings += Self.unverifiedDatabaseWarnings(startup.configuration, environment: context.environment)
        report.settings = startup.configuration.redactedDescription.split(separator: "\n").map { line in
            let parts = line.split(separator: "=", maxSplits: 1)
            return Setting(name: String(parts[0]), value: parts.count > 1 ? String(parts[1]) : "")
        }
        if online { report.online = await OnlineChecks.run(startup) }
        return report
    }
}
