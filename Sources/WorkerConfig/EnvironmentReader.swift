import FoundationEssentials
import Glibc
import Timekeeping
import Logging

/// Reads and validates single variables; every error names the variable.
struct EnvironmentReader {
    private let environment: [String: String]

    init(_ environment: [String: String]) { self.environment = environment }

    /// The value, or nil when unset or empty.
    func raw(_ name: String) -> String? {
        guard let value = environment[name]?.trimmingWhitespace(), !value.isEmpty else { return nil }
        return value
    }

    func required(_ name: String) throws(ConfigurationError) -> String {
        guard let value = raw(name) else { throw ConfigurationError(name, "is not set") }
        return value
    }

    func integer(_ name: String, default fallback: Int, range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let text = raw(name) else { return fallback }
        guard let value = ValueParsing.integer(text) else {
            throw ConfigurationError(name, "must be a whole number in \(range.lowerBound)...\(range.upperBound), got \"\(text)\"")
        }
        guard range.contains(value) else {
            throw ConfigurationError(name, "must be in \(range.lowerBound)...\(range.upperBound), got \(value)")
        }
        return value
    }

    func duration(_ name: String, default fallback: Duration) throws(ConfigurationError) -> Duration {
        guard let text = raw(name) else { return fallback }
        guard let value = ValueParsing.duration(text), value > .zero else {
            throw ConfigurationError(name, "must be a positive duration such as 500ms, 30s, 15m, 6h or 7d, got \"\(text)\"")
        }
        return value
    }

    func url(_ name: String, default fallback: String) throws(ConfigurationError) -> String {
        guard let text = raw(name) else { return fallback }
        guard let value = ValueParsing.baseURL(text) else {
            throw ConfigurationError(name, "must be an https URL with a host and optional port and nothing else (no path, query or credentials), such as https://host[:port], got \"\(text)\"")
        }
        return value
    }

    func hostPort(_ name: String, default fallback: String) throws(ConfigurationError) -> (host: String, port: UInt16) {
        let text = raw(name) ?? fallback
        guard let value = ValueParsing.hostPort(text) else {
            throw ConfigurationError(name, "must be host:port (e.g. 127.0.0.1:9464 or [::1]:9464), got \"\(text)\"")
        }
        return value
    }

    func logLevel(_ name: String, default fallback: LogLevel) throws(ConfigurationError) -> LogLevel {
        guard let text = raw(name) else { return fallback }
        guard let level = LogLevel(name: text) else {
            throw ConfigurationError(name, "must be one of \(LogLevel.allCases.map(\.name).joined(separator: ", ")), got \"\(text)\"")
        }
        return level
    }

    /// A readable file path; `fallback` applies when unset (nil fallback: required).
    func file(_ name: String, default fallback: String?) throws(ConfigurationError) -> String {
        guard let path = raw(name) ?? fallback else {
            throw ConfigurationError(name, "is not set, and $CREDENTIALS_DIRECTORY is not set to supply the default")
        }
        try checkReadable(name, path)
        return path
    }

    func optionalFile(_ name: String) throws(ConfigurationError) -> String? {
        guard let path = raw(name) else { return nil }
        try checkReadable(name, path)
        return path
    }

    func checkReadable(_ name: String, _ path: String) throws(ConfigurationError) {
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw ConfigurationError(name, "file \(path) does not exist")
        }
        guard status.st_mode & S_IFMT != S_IFDIR else { throw ConfigurationError(name, "\(path) is a directory, not a file") }
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw ConfigurationError(name, "file \(path) is not readable by this user")
        }
    }

    /// The App Store group: all of issuer, key id and bundle id, or none (loop off).
    func appStore(credentials: String?) throws(ConfigurationError) -> Configuration.AppStore? {
        let keys = ["APPSTORE_ISSUER_ID", "APPSTORE_KEY_ID", "APPSTORE_BUNDLE_ID", "APPSTORE_ROOT_CERT_FILES"]
        let present = keys.filter { raw($0) != nil }
        guard !present.isEmpty || raw("APPSTORE_PRIVATE_KEY_FILE") != nil else { return nil }
        if let absent = keys.first(where: { raw($0) == nil }) {
            throw ConfigurationError(absent, "is not set, but other APPSTORE_* settings are (set all of them, or none to turn re-checks off)")
        }
        let keyFile = try file("APPSTORE_PRIVATE_KEY_FILE",
                               default: credentials.map { "\($0)/\(Configuration.Defaults.appStoreKeyCredential)" })
        let roots = try required("APPSTORE_ROOT_CERT_FILES").split(separator: ",")
            .map { $0.trimmingWhitespace() }.filter { !$0.isEmpty }
        guard !roots.isEmpty else { throw ConfigurationError("APPSTORE_ROOT_CERT_FILES", "lists no file") }
        for root in roots { try checkReadable("APPSTORE_ROOT_CERT_FILES", root) }
        return Configuration.AppStore(
            issuerId: try required("APPSTORE_ISSUER_ID"), keyId: try required("APPSTORE_KEY_ID"), privateKeyFile: keyFile,
            bundleId: try required("APPSTORE_BUNDLE_ID"), rootCertificateFiles: roots,
            productionURL: try url("APPSTORE_PRODUCTION_URL", default: Configuration.Defaults.appStoreProductionURL),
            sandboxURL: try url("APPSTORE_SANDBOX_URL", default: Configuration.Defaults.appStoreSandboxURL),
            requestsPerSecond: try integer("APPSTORE_REQUESTS_PER_SECOND", default: Configuration.Defaults.appStoreRequestsPerSecond,
                                           range: 1...Configuration.Defaults.appStoreMaxRequestsPerSecond),
            notificationHistory: try flag("APPSTORE_NOTIFICATION_HISTORY", default: false),
            notificationPollInterval: try duration("APPSTORE_NOTIFICATION_POLL_INTERVAL",
                                                   default: Configuration.Defaults.appStoreNotificationPollInterval))
    }

    /// `on`/`off` (also `true`/`false`, `yes`/`no`, `1`/`0`).
    func flag(_ name: String, default fallback: Bool) throws(ConfigurationError) -> Bool {
        guard let text = raw(name) else { return fallback }
        switch text.lowercased() {
        case "on", "true", "yes", "1": return true
        case "off", "false", "no", "0": return false
        default: throw ConfigurationError(name, "must be on or off, got \"\(text)\"")
        }
    }
}
