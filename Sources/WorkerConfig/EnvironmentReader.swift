import FoundationEssentials
import Glibc
import Logging
import Postgres
import TextSupport

/// Reads and validates single variables; every error names the variable. A bad value is recorded in `errors` and the
/// default returned, so one pass finds every bad setting, not only the first.
final class EnvironmentReader {
    private let environment: [String: String]
    /// Every problem found so far, in reading order.
    private(set) var errors: [ConfigurationError] = []

    init(_ environment: [String: String]) { self.environment = environment }

    /// Records a problem with `name` (once per variable: its first problem is the one to fix).
    func fail(_ name: String, _ problem: String) {
        guard !hasError(name) else { return }
        errors.append(ConfigurationError(name, problem))
    }

    /// Whether `name` already has a recorded problem.
    func hasError(_ name: String) -> Bool { errors.contains { $0.variable == name } }

    /// Throws every recorded problem, if any.
    func finish() throws(ConfigurationErrors) {
        guard errors.isEmpty else { throw ConfigurationErrors(errors) }
    }

    /// The value, or nil when unset or empty.
    func raw(_ name: String) -> String? {
        guard let value = environment[name]?.trimmingWhitespace(), !value.isEmpty else { return nil }
        return value
    }

    func required(_ name: String) -> String {
        guard let value = raw(name) else {
            fail(name, "is not set")
            return ""
        }
        return value
    }

    /// A connection string libpq can parse (checked with libpq's own parser, `PQconninfoParse`): one it cannot would
    /// fail every connection attempt for ever. The value is never echoed (libpq's complaint quotes it; redacted).
    func conninfo(_ name: String, required: Bool) -> String? {
        guard let text = required ? self.required(name) : raw(name), !text.isEmpty else { return nil }
        if let problem = ConninfoParameters.problem(text) {
            fail(name, "libpq cannot parse it (\(problem)); percent-encode '%', spaces and quotes in a URI (value not shown)")
        }
        return text
    }

    /// `DATABASE_STATEMENT_TIMEOUT`: at least 1 s, and at most what PostgreSQL's `statement_timeout` takes.
    func statementTimeout() -> Duration {
        let name = "DATABASE_STATEMENT_TIMEOUT"
        let value = duration(name, default: Configuration.Defaults.databaseStatementTimeout)
        if value < .seconds(1) {
            fail(name, "must be at least 1s")
        } else if value > Configuration.Defaults.maxStatementTimeout {
            fail(name, "must be at most \(Configuration.Defaults.maxStatementTimeout.wholeMilliseconds)ms (about 24.8 days: PostgreSQL's "
                 + "largest statement_timeout), got \"\(raw(name) ?? "")\"")
        } else {
            return value
        }
        return Configuration.Defaults.databaseStatementTimeout
    }

    /// `SHUTDOWN_TIMEOUT`: at most `Configuration.Defaults.maxShutdownTimeout`, so the unit's `TimeoutStopSec=` never
    /// kills the daemon while it still records what it sent.
    func shutdownTimeout() -> Duration {
        let name = "SHUTDOWN_TIMEOUT"
        let value = duration(name, default: Configuration.Defaults.shutdownTimeout)
        let limit = Configuration.Defaults.maxShutdownTimeout
        guard value <= limit else {
            fail(name, "must be at most \(ValueParsing.format(limit)): the unit's TimeoutStopSec=\(ValueParsing.format(Configuration.Defaults.unitStopTimeout)) "
                 + "less \(ValueParsing.format(Configuration.Defaults.unitStopTimeout - limit)) to record the outcomes of sends in flight and exit, "
                 + "got \"\(raw(name) ?? "")\"")
            return Configuration.Defaults.shutdownTimeout
        }
        return value
    }

    func integer(_ name: String, default fallback: Int, range: ClosedRange<Int>) -> Int {
        guard let text = raw(name) else { return fallback }
        guard let value = ValueParsing.integer(text) else {
            fail(name, "must be a whole number in \(range.lowerBound)...\(range.upperBound), got \"\(text)\"")
            return fallback
        }
        guard range.contains(value) else {
            fail(name, "must be in \(range.lowerBound)...\(range.upperBound), got \(value)")
            return fallback
        }
        return value
    }

    /// The proxy for outbound HTTPS as libcurl picks it (`https_proxy`, `HTTPS_PROXY`, then `all_proxy`,
    /// `ALL_PROXY`; the first set and not empty), checked here because libcurl would only fail every request with it.
    /// nil when none is set (or the one set is bad: recorded under its own name).
    func httpsProxy() -> (variable: String, url: String)? {
        guard let variable = ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"].first(where: { !(environment[$0] ?? "").isEmpty }),
              let text = environment[variable] else { return nil }
        if let problem = ValueParsing.proxyProblem(text) {
            fail(variable, "\(problem), got \"\(ValueParsing.redactSetting(text))\"")
            return nil
        }
        return (variable, text)
    }

    func duration(_ name: String, default fallback: Duration) -> Duration {
        guard let text = raw(name) else { return fallback }
        guard let value = ValueParsing.duration(text), value > .zero else {
            if ValueParsing.durationIsTooLarge(text) {
                fail(name, "must be at most \(ValueParsing.maxDurationText) (100 years), got \"\(text.prefix(40))\"")
            } else {
                fail(name, "must be a positive duration such as 500ms, 30s, 15m, 6h or 7d, got \"\(text)\"")
            }
            return fallback
        }
        return value
    }

    func url(_ name: String, default fallback: String) -> String {
        guard let text = raw(name) else { return fallback }
        guard let value = ValueParsing.baseURL(text) else {
            fail(name, "must be an https URL with a host and optional port and nothing else (no path, query or credentials), such as https://host[:port], got \"\(ValueParsing.redactSetting(text))\"")
            return fallback
        }
        return value
    }

    func hostPort(_ name: String, default fallback: String) -> (host: String, port: UInt16) {
        let text = raw(name) ?? fallback
        guard let value = ValueParsing.hostPort(text) else {
            fail(name, "must be host:port (e.g. 127.0.0.1:9464 or [::1]:9464), got \"\(text)\"")
            return ValueParsing.hostPort(fallback) ?? ("127.0.0.1", 0)
        }
        return value
    }

    func logLevel(_ name: String, default fallback: LogLevel) -> LogLevel {
        guard let text = raw(name) else { return fallback }
        guard let level = LogLevel(name: text) else {
            fail(name, "must be one of \(LogLevel.allCases.map(\.name).joined(separator: ", ")), got \"\(text)\"")
            return fallback
        }
        return level
    }

    /// A readable file path; `fallback` applies when unset (nil fallback: required). "" when unset without a default.
    func file(_ name: String, default fallback: String?) -> String {
        guard let path = raw(name) ?? fallback else {
            fail(name, "is not set, and $CREDENTIALS_DIRECTORY is not set to supply the default")
            return ""
        }
        checkReadable(name, path)
        return path
    }

    /// A readable file of at most `limit` bytes (`typical` says what such a file weighs), or nil when unset.
    func optionalFile(_ name: String, limit: Int, typical: String) -> String? {
        guard let path = raw(name) else { return nil }
        if checkReadable(name, path), case .failure(let failure) = BoundedFile.read(path, limit: limit) {
            fail(name, failure.problem(path, typical: typical))
        }
        return path
    }

    /// Records a problem when `path` does not exist, is a directory or is not readable; true when it is fine.
    @discardableResult
    func checkReadable(_ name: String, _ path: String) -> Bool {
        var status = stat()
        guard stat(path, &status) == 0 else {
            // EACCES: a directory on the way is closed to this user (/etc/medication-worker is 0750 root:medication-worker).
            fail(name, errno == EACCES ? "file \(path) cannot be reached by this user (permission denied on a directory of its path)"
                                       : "file \(path) does not exist")
            return false
        }
        guard status.st_mode & S_IFMT != S_IFDIR else {
            fail(name, "\(path) is a directory, not a file")
            return false
        }
        guard FileManager.default.isReadableFile(atPath: path) else {
            fail(name, "file \(path) is not readable by this user")
            return false
        }
        return true
    }

    /// The App Store group: all of issuer, key id and bundle id, or none (loop off). nil when absent or incomplete
    /// (each missing member recorded).
    func appStore(credentials: String?) -> Configuration.AppStore? {
        // The optional settings are checked even while the App Store is off: a bad value must not wait to be found
        // until the day the App Store is turned on.
        let productionURL = url("APPSTORE_PRODUCTION_URL", default: Configuration.Defaults.appStoreProductionURL)
        let sandboxURL = url("APPSTORE_SANDBOX_URL", default: Configuration.Defaults.appStoreSandboxURL)
        let requestsPerSecond = integer("APPSTORE_REQUESTS_PER_SECOND", default: Configuration.Defaults.appStoreRequestsPerSecond,
                                        range: 1...Configuration.Defaults.appStoreMaxRequestsPerSecond)
        let notificationHistory = flag("APPSTORE_NOTIFICATION_HISTORY", default: false)
        let notificationPollInterval = duration("APPSTORE_NOTIFICATION_POLL_INTERVAL",
                                                default: Configuration.Defaults.appStoreNotificationPollInterval)
        let keys = ["APPSTORE_ISSUER_ID", "APPSTORE_KEY_ID", "APPSTORE_BUNDLE_ID", "APPSTORE_ROOT_CERT_FILES"]
        let present = keys.filter { raw($0) != nil }
        guard !present.isEmpty || raw("APPSTORE_PRIVATE_KEY_FILE") != nil else { return nil }
        let absent = keys.filter { raw($0) == nil }
        for name in absent {
            fail(name, "is not set, but other APPSTORE_* settings are (set all of them, or none to turn re-checks off)")
        }
        let keyFile = file("APPSTORE_PRIVATE_KEY_FILE", default: credentials.map { "\($0)/\(Configuration.Defaults.appStoreKeyCredential)" })
        let roots = (raw("APPSTORE_ROOT_CERT_FILES") ?? "").split(separator: ",")
            .map { $0.trimmingWhitespace() }.filter { !$0.isEmpty }
        if roots.isEmpty, absent.isEmpty { fail("APPSTORE_ROOT_CERT_FILES", "lists no file") }
        for root in roots { checkReadable("APPSTORE_ROOT_CERT_FILES", root) }
        let settings = Configuration.AppStore(
            issuerId: raw("APPSTORE_ISSUER_ID") ?? "", keyId: raw("APPSTORE_KEY_ID") ?? "", privateKeyFile: keyFile,
            bundleId: raw("APPSTORE_BUNDLE_ID") ?? "", rootCertificateFiles: roots,
            productionURL: productionURL, sandboxURL: sandboxURL, requestsPerSecond: requestsPerSecond,
            notificationHistory: notificationHistory, notificationPollInterval: notificationPollInterval)
        return absent.isEmpty ? settings : nil
    }

    /// `on`/`off` (also `true`/`false`, `yes`/`no`, `1`/`0`).
    func flag(_ name: String, default fallback: Bool) -> Bool {
        guard let text = raw(name) else { return fallback }
        switch text.lowercased() {
        case "on", "true", "yes", "1": return true
        case "off", "false", "no", "0": return false
        default:
            fail(name, "must be on or off, got \"\(text)\"")
            return fallback
        }
    }
}
