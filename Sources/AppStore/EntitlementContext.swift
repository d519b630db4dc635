import FoundationEssentials
import HTTP
import Logging
import Metrics
import Postgres

/// What the entitlement sweep (`EntitlementRechecker`) and the notification poller (`NotificationHistoryPoller`)
/// share, built once by the daemon's wiring and handed to both: the App Store client and verifier, the row store, one
/// rate pacer per environment (Apple's limit is the key's, whoever asks), the key's state, and the revoked/restored
/// counters. Neither builds or lends the other anything.
public final class EntitlementContext: Sendable {
    let configuration: AppStoreConfiguration
    let http: HTTPClient
    let client: AppStoreClient
    let verifier: SignedTransactionVerifier
    let store: EntitlementStore
    let pacers: [AppStoreEnvironment: RatePacer]
    let keyFaults: KeyFaults
    /// The latest lookups' results: `/readyz` `app_store` says when every one failed.
    let recentLookups: RecentLookups
    let logger: Logger
    let metrics: MetricsRegistry
    let revokedTotal: Counter
    let restoredTotal: Counter
    let now: @Sendable () -> Date

    /// `database` (4 connections suffice) runs the row statements, `leaseConnection` (1) the lease renewals, so a busy
    /// pass never delays a renewal; `http` is sized by `EntitlementRechecker.httpConfiguration(for:)`. The caller owns
    /// all three and closes them after the services returned. `onKeyStatus` hears, for `/readyz` `app_store`, when Apple
    /// starts or stops refusing our key, or when every recent lookup failed (the reason; nil: all well again).
    public init(configuration: AppStoreConfiguration, database: PostgresClient, leaseConnection: PostgresClient, http: HTTPClient,
                logger: Logger, metrics: MetricsRegistry, now: @escaping @Sendable () -> Date = Date.init,
                onKeyStatus: @escaping @Sendable (String?) -> Void = { _ in }) {
        self.configuration = configuration
        self.http = http
        client = AppStoreClient(configuration: configuration, http: http, now: now)
        verifier = SignedTransactionVerifier(roots: configuration.roots)
        store = EntitlementStore(database: database, leaseConnection: leaseConnection)
        pacers = Dictionary(uniqueKeysWithValues: EntitlementRechecker.environments.map { ($0, RatePacer(rate: configuration.rate($0))) })
        let readiness = AppStoreReadiness(report: onKeyStatus)
        keyFaults = KeyFaults(first: configuration.keyRefusedBackoff, logger: logger, onStatus: { readiness.key($0) })
        recentLookups = RecentLookups(onStatus: { readiness.lookups($0) })
        self.logger = logger
        self.metrics = metrics
        revokedTotal = metrics.counter("entitlements_revoked_total", help: "Entitlements revoked after a verified refund or revocation.")
        restoredTotal = metrics.counter("entitlements_restored_total", help: "Entitlements this worker revoked and restored after Apple reversed it.")
        self.now = now
    }
}
