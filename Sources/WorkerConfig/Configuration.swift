import FoundationEssentials
import HTTP
import Logging
import Timekeeping

/// Every setting (`config/worker.env`), read and validated once at start.
public struct Configuration: Sendable {
    /// Named defaults (River style: one constant per knob).
    public enum Defaults {
        public static let fcmBaseURL = "https://fcm.googleapis.com"
        public static let healthAddress = "127.0.0.1:9464"
        public static let batchSize = 100
        /// 500 on the wire: FCM's default quota (10,000/s) at a 50 ms answer time, by Little's law (the window on the
        /// wire, `SendWindow`, takes fewer when FCM answers faster or slows down).
        public static let maxInFlight = 1200
        public static let pollIntervalMS = 1000
        public static let leaseSeconds = 60
        public static let maxAttempts = 10
        public static let eventMaxAge = Duration.seconds(24 * 3600)
        public static let entitlementRecheckInterval = Duration.seconds(6 * 3600)
        public static let outboxRetention = Duration.seconds(7 * 86_400)
        public static let deliveryRetention = Duration.seconds(30 * 86_400)
        public static let logLevel = LogLevel.info
        public static let shutdownTimeout = Duration.seconds(10)
        public static let databaseStatementTimeout = Duration.seconds(30)
        /// PostgreSQL's largest `statement_timeout` (INT_MAX milliseconds, about 24.8 days); more is refused by the
        /// server at every transaction.
        public static let maxStatementTimeout = Duration.milliseconds(2_147_483_647)
        /// `TimeoutStopSec=` of systemd/medication-worker.service (a test reads the unit and compares).
        public static let unitStopTimeout = Duration.seconds(20)
        /// The longest `SHUTDOWN_TIMEOUT`: the unit's stop timeout less 5 s to record the outcomes of sends in flight,
        /// release leases and exit before systemd sends SIGKILL.
        public static let maxShutdownTimeout = unitStopTimeout - .seconds(5)
        public static let appStoreProductionURL = "https://api.storekit.apple.com"
        public static let appStoreSandboxURL = "https://api.storekit-sandbox.apple.com"
        public static let fcmServiceAccountCredential = "fcm-service-account.json"
        public static let appStoreKeyCredential = "appstore-key.p8"
        /// Production lookups per second (sandbox: a tenth); Apple allows 50 (5 in sandbox).
        public static let appStoreRequestsPerSecond = 20
        public static let appStoreMaxRequestsPerSecond = 50
        public static let appStoreNotificationPollInterval = Duration.seconds(300)
    }

    /// App Store Server API settings; nil in `Configuration.appStore` turns the loop off.
    public struct AppStore: Sendable {
        public var issuerId: String
        public var keyId: String
        public var privateKeyFile: String
        public var bundleId: String
        public var rootCertificateFiles: [String]
        public var productionURL: String
        public var sandboxURL: String
        /// Production requests per second; sandbox gets a tenth.
        public var requestsPerSecond: Int
        /// Read Get Notification History for refunds (`APPSTORE_NOTIFICATION_HISTORY=on`).
        public var notificationHistory: Bool
        public var notificationPollInterval: Duration
    }

    public var databaseURL: String
    /// A direct connection for LISTEN when `DATABASE_URL` goes through a transaction-mode pooler
    /// (which cannot deliver notifications); nil: LISTEN on `DATABASE_URL`.
    public var databaseListenURL: String? = nil
    /// `statement_timeout` of the worker's own statements; a call without any answer is ended by the
    /// worker after 1.5 × this (a server that stopped answering never enforces its own timeout).
    public var databaseStatementTimeout: Duration = Defaults.databaseStatementTimeout
    public var fcmServiceAccountFile: String
    public var fcmBaseURL: String
    /// `FCM_MAX_SENDS_PER_SECOND`: the FCM project's send budget, shared by the live instances (nil: no cap).
    public var fcmMaxSendsPerSecond: Int? = nil
    public var tlsCAFile: String?
    public var healthHost: String
    public var healthPort: UInt16
    public var batchSize: Int
    /// `MAX_IN_FLIGHT`: sends held at once, from their start until their outcome is written (docs/operations.md,
    /// "Stopping").
    public var maxInFlight: Int
    /// Of those, the most on the wire at once: half (rounded up), so sending goes on while the other half's outcomes
    /// are written.
    public var maxSending: Int { (maxInFlight + 1) / 2 }
    public var pollInterval: Duration
    public var leaseDuration: Duration
    public var maxAttempts: Int
    public var eventMaxAge: Duration
    public var appStore: AppStore?
    public var entitlementRecheckInterval: Duration
    public var outboxRetention: Duration
    public var deliveryRetention: Duration
    public var logLevel: LogLevel
    public var shutdownTimeout: Duration
    /// The proxy for outbound HTTPS and the variable it came from (nil: direct); the HTTP client reads the same
    /// variables itself, so this is what `check-config` shows and what was checked.
    public var httpsProxy: (variable: String, url: String)? = nil
    /// `NO_PROXY` (or `no_proxy`): hosts reached directly (libcurl's rules).
    public var noProxy: String? = nil

    /// Reads the configuration from environment variables; throws every problem found, not only the first.
    public static func load(from environment: [String: String]) throws(ConfigurationErrors) -> Configuration {
        let (configuration, errors) = read(from: environment)
        guard errors.isEmpty else { throw ConfigurationErrors(errors) }
        return configuration
    }

    /// Reads the configuration and returns it with every problem found; a bad setting holds its default (or "" when
    /// it has none), so the caller can go on checking the rest (the credential files) before reporting them all.
    public static func read(from environment: [String: String]) -> (configuration: Configuration, errors: [ConfigurationError]) {
        let reader = EnvironmentReader(environment)
        let credentials = environment["CREDENTIALS_DIRECTORY"].flatMap { $0.isEmpty ? nil : $0 }

        let databaseURL = reader.conninfo("DATABASE_URL", required: true) ?? ""
        let databaseListenURL = reader.conninfo("DATABASE_LISTEN_URL", required: false)
        let statementTimeout = reader.statementTimeout()
        let serviceAccount = reader.file("FCM_SERVICE_ACCOUNT_FILE",
                                         default: credentials.map { "\($0)/\(Defaults.fcmServiceAccountCredential)" })
        let fcmBaseURL = reader.url("FCM_BASE_URL", default: Defaults.fcmBaseURL)
        let fcmMaxSends = reader.raw("FCM_MAX_SENDS_PER_SECOND") == nil ? nil
            : reader.integer("FCM_MAX_SENDS_PER_SECOND", default: 0, range: 1...1_000_000)
        let tlsCAFile = reader.optionalFile("TLS_CA_FILE", limit: HTTPClientConfiguration.maxCAFileBytes,
                                            typical: HTTPClientConfiguration.typicalCAFileSize)
        let health = reader.hostPort("HEALTH_ADDR", default: Defaults.healthAddress)
        let batchSize = reader.integer("BATCH_SIZE", default: Defaults.batchSize, range: 1...1000)
        let maxInFlight = reader.integer("MAX_IN_FLIGHT", default: Defaults.maxInFlight, range: 1...10_000)
        let pollMS = reader.integer("POLL_INTERVAL_MS", default: Defaults.pollIntervalMS, range: 10...3_600_000)
        let leaseSeconds = reader.integer("LEASE_SECONDS", default: Defaults.leaseSeconds, range: 5...86_400)
        let maxAttempts = reader.integer("MAX_ATTEMPTS", default: Defaults.maxAttempts, range: 1...1000)
        let eventMaxAge = reader.duration("EVENT_MAX_AGE", default: Defaults.eventMaxAge)
        let recheck = reader.duration("ENTITLEMENT_RECHECK_INTERVAL", default: Defaults.entitlementRecheckInterval)
        let outboxRetention = reader.duration("OUTBOX_RETENTION", default: Defaults.outboxRetention)
        let deliveryRetention = reader.duration("DELIVERY_RETENTION", default: Defaults.deliveryRetention)
        if deliveryRetention < eventMaxAge, !reader.hasError("EVENT_MAX_AGE") {
            // A delivery is younger than its event, and an event older than EVENT_MAX_AGE is never sent: kept at least
            // that long, no delivery of an event that may still be sent is deleted (one deleted would be fanned out and
            // sent again: an event not settled yet does not protect its deliveries by key).
            let value = reader.raw("DELIVERY_RETENTION").map { "\"\($0)\"" } ?? "the default \(ValueParsing.format(deliveryRetention))"
            reader.fail("DELIVERY_RETENTION", "must be at least EVENT_MAX_AGE (\(ValueParsing.format(eventMaxAge))): a delivery deleted while "
                + "its event may still be sent would be sent again, got \(value)")
        }
        let shutdownTimeout = reader.shutdownTimeout()
        let logLevel = reader.logLevel("LOG_LEVEL", default: Defaults.logLevel)
        let appStore = reader.appStore(credentials: credentials)
        let httpsProxy = reader.httpsProxy()
        let noProxy = ["no_proxy", "NO_PROXY"].lazy.compactMap { environment[$0] }.first { !$0.isEmpty }

        var configuration = Configuration(
            databaseURL: databaseURL, databaseListenURL: databaseListenURL, databaseStatementTimeout: statementTimeout,
            fcmServiceAccountFile: serviceAccount, fcmBaseURL: fcmBaseURL, fcmMaxSendsPerSecond: fcmMaxSends, tlsCAFile: tlsCAFile,
            healthHost: health.host, healthPort: health.port, batchSize: batchSize, maxInFlight: maxInFlight,
            pollInterval: .milliseconds(pollMS), leaseDuration: .seconds(leaseSeconds), maxAttempts: maxAttempts,
            eventMaxAge: eventMaxAge, appStore: appStore, entitlementRecheckInterval: recheck,
            outboxRetention: outboxRetention, deliveryRetention: deliveryRetention, logLevel: logLevel,
            shutdownTimeout: shutdownTimeout)
        configuration.httpsProxy = httpsProxy
        configuration.noProxy = noProxy
        return (configuration, reader.errors)
    }

    /// The effective configuration as `NAME=value` lines, secrets redacted (for `check-config`).
    public var redactedDescription: String {
        var lines: [(String, String)] = [
            ("DATABASE_URL", ValueParsing.redactSetting(databaseURL)),
            ("DATABASE_LISTEN_URL", databaseListenURL.map(ValueParsing.redactSetting) ?? "(none: LISTEN on DATABASE_URL)"),
            ("DATABASE_STATEMENT_TIMEOUT", ValueParsing.format(databaseStatementTimeout)),
            ("FCM_SERVICE_ACCOUNT_FILE", fcmServiceAccountFile),
            ("FCM_BASE_URL", fcmBaseURL),
            ("FCM_MAX_SENDS_PER_SECOND", fcmMaxSendsPerSecond.map { "\($0) (shared by the live instances)" } ?? "(none: no cap; after FCM's quota is hit, below the rate that hit it)"),
            ("TLS_CA_FILE", tlsCAFile ?? "(none)"),
            ("HEALTH_ADDR", healthHost.contains(":") ? "[\(healthHost)]:\(healthPort)" : "\(healthHost):\(healthPort)"),
            ("BATCH_SIZE", String(batchSize)),
            ("MAX_IN_FLIGHT", String(maxInFlight)),
            ("POLL_INTERVAL_MS", String(pollInterval.wholeMilliseconds)),
            ("LEASE_SECONDS", String(leaseDuration.components.seconds)),
            ("MAX_ATTEMPTS", String(maxAttempts)),
            ("EVENT_MAX_AGE", ValueParsing.format(eventMaxAge)),
        ]
        if let appStore {
            lines += [
                ("APPSTORE_ISSUER_ID", appStore.issuerId),
                ("APPSTORE_KEY_ID", appStore.keyId),
                ("APPSTORE_PRIVATE_KEY_FILE", appStore.privateKeyFile),
                ("APPSTORE_BUNDLE_ID", appStore.bundleId),
                ("APPSTORE_ROOT_CERT_FILES", appStore.rootCertificateFiles.joined(separator: ",")),
                ("APPSTORE_PRODUCTION_URL", appStore.productionURL),
                ("APPSTORE_SANDBOX_URL", appStore.sandboxURL),
                ("APPSTORE_REQUESTS_PER_SECOND", String(appStore.requestsPerSecond)),
                ("APPSTORE_NOTIFICATION_HISTORY", appStore.notificationHistory ? "on" : "off"),
                ("APPSTORE_NOTIFICATION_POLL_INTERVAL", ValueParsing.format(appStore.notificationPollInterval)),
            ]
        } else {
            lines.append(("APPSTORE_*", "(not configured: entitlement re-checks are off)"))
        }
        lines += [
            ("ENTITLEMENT_RECHECK_INTERVAL", ValueParsing.format(entitlementRecheckInterval)),
            ("OUTBOX_RETENTION", ValueParsing.format(outboxRetention)),
            ("DELIVERY_RETENTION", ValueParsing.format(deliveryRetention)),
            ("LOG_LEVEL", logLevel.name),
            ("SHUTDOWN_TIMEOUT", ValueParsing.format(shutdownTimeout)),
            ("HTTPS_PROXY", httpsProxy.map { "\(ValueParsing.redactSetting($0.url)) (from \($0.variable))" } ?? "(none: direct)"),
            ("NO_PROXY", noProxy ?? "(none)"),
        ]
        return lines.map { "\($0.0)=\($0.1)" }.joined(separator: "\n")
    }
}

extension Configuration {
    /// What the operator commands that only talk to the database need; read by the same rules as `run`.
    public struct OperatorSettings: Sendable {
        public var databaseURL: String
        public var statementTimeout: Duration
        /// Events older than this would only expire: `redrive` and `resend` leave them.
        public var eventMaxAge: Duration
        public var logLevel: LogLevel
    }

    /// `DATABASE_URL`, `DATABASE_STATEMENT_TIMEOUT`, `EVENT_MAX_AGE` and `LOG_LEVEL`, so the database commands run without FCM
    /// credentials.
    public static func loadOperatorSettings(from environment: [String: String]) throws(ConfigurationErrors) -> OperatorSettings {
        let reader = EnvironmentReader(environment)
        let settings = OperatorSettings(
            databaseURL: reader.conninfo("DATABASE_URL", required: true) ?? "",
            statementTimeout: reader.statementTimeout(),
            eventMaxAge: reader.duration("EVENT_MAX_AGE", default: Defaults.eventMaxAge),
            logLevel: reader.logLevel("LOG_LEVEL", default: Defaults.logLevel))
        try reader.finish()
        return settings
    }

    /// Just `DATABASE_URL` and `LOG_LEVEL`, for the commands that only talk to the database
    /// (`migrate`, `status`, `redrive`), so they run without FCM credentials.
    public static func loadDatabaseOnly(from environment: [String: String]) throws(ConfigurationErrors) -> (databaseURL: String, logLevel: LogLevel) {
        let reader = EnvironmentReader(environment)
        let settings = (reader.conninfo("DATABASE_URL", required: true) ?? "", reader.logLevel("LOG_LEVEL", default: Defaults.logLevel))
        try reader.finish()
        return settings
    }
}
