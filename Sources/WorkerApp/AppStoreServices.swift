import AppStore
import HTTP
import Logging
import Metrics
import Postgres
import WorkerConfig

/// The entitlement re-checks and what they use: two pools of their own (row statements, lease renewals) and an HTTP
/// client; the daemon closes them after the services stopped.
struct AppStoreServices: Sendable {
    let rechecker: EntitlementRechecker
    /// The notification history poller, when APPSTORE_NOTIFICATION_HISTORY is on.
    let poller: NotificationHistoryPoller?
    let http: HTTPClient
    let database: PostgresClient
    let leaseConnection: PostgresClient

    /// `configuration`: the key and roots `StartupConfiguration` loaded. `onKeyStatus`: Apple refusing our key (a reason)
    /// or accepting it again (nil), for `/readyz` `app_store`.
    init(configuration: AppStoreConfiguration, worker: Configuration, logger: Logger, metrics: MetricsRegistry,
         onKeyStatus: @escaping @Sendable (String?) -> Void = { _ in }) throws {
        let http = try HTTPClient(configuration: EntitlementRechecker.httpConfiguration(for: configuration))
        // The worker's statement and lock timeouts, per transaction like the pipeline's; durable commits (revocations are money).
        let timeout = worker.databaseStatementTimeout
        let database = PostgresClient(conninfo: worker.databaseURL, maxConnections: 4,
                                      settings: .worker(statementTimeout: timeout, lockTimeout: Daemon.lockTimeout, asynchronousCommit: false),
                                      queryDeadline: timeout + timeout / 2)
        let leaseConnection = PostgresClient(conninfo: worker.databaseURL, maxConnections: 1, queryDeadline: timeout + timeout / 2)
        // The sweep and the notification poller, side by side over one shared context.
        let context = EntitlementContext(configuration: configuration, database: database, leaseConnection: leaseConnection, http: http,
                                         logger: logger.child(label: "appstore"), metrics: metrics, onKeyStatus: onKeyStatus)
        rechecker = EntitlementRechecker(context: context)
        poller = NotificationHistoryPoller(context: context)
        self.http = http
        self.database = database
        self.leaseConnection = leaseConnection
    }

    /// Closes the HTTP client and the pools (after the services stopped).
    func close() async {
        http.shutdown()
        await database.close()
        await leaseConnection.close()
    }
}
