import AppStore
import Crypto
import FCM
import FoundationEssentials
import HTTP
import Health
import Logging
import Metrics
import OperatorCommands
import Outbox
import Postgres
import Systemd
import WorkerConfig

/// The daemon's collaborators built from configuration before anything runs: metrics, the
/// push sender, health state and endpoint, the systemd notifier, the App Store re-checks when configured.
final class DaemonParts: Sendable {
    let metrics: MetricsRegistry
    let sender: FCMSender
    let liveness: Liveness
    let health: HealthState
    let healthServer: HealthServer
    let notifier: SystemdNotifier
    let appStore: AppStoreParts?

    private init(metrics: MetricsRegistry, sender: FCMSender, liveness: Liveness, health: HealthState, healthServer: HealthServer,
                 notifier: SystemdNotifier, appStore: AppStoreParts?) {
        self.metrics = metrics
        self.sender = sender
        self.liveness = liveness
        self.health = health
        self.healthServer = healthServer
        self.notifier = notifier
        self.appStore = appStore
    }

    /// The log sink: journald when stderr is the journal, else key=value text.
    static func logSink() -> any LogSink { LogSinks.automatic() }

    /// Builds every part from what `StartupConfiguration` loaded and checked (no credential file is read again).
    static func make(startup: StartupConfiguration, logger: Logger) throws -> DaemonParts {
        let configuration = startup.configuration
        let metrics = MetricsRegistry()
        ProcessMetrics.register(in: metrics)
        let account = startup.serviceAccount
        let http = HTTPClientConfiguration(maxInFlight: configuration.maxSending, connectTimeout: .seconds(10),
                                           requestTimeout: .seconds(15), caFile: configuration.tlsCAFile)
        // A loop that makes no progress for this long counts as stuck: watchdog pings stop, /healthz says so.
        let liveness = Liveness(stallAfter: .seconds(25))
        let health = HealthState(stalled: { liveness.stalled() })
        health.set(.database, .down("not checked yet"))
        health.set(.fcmCredentials, .ok)
        health.set(.fcm, .ok)
        // The whole budget until the first heartbeat (at start) tells how many instances share it.
        let fcm = FCMConfiguration(serviceAccount: account, baseURL: configuration.fcmBaseURL, http: http,
                                   maxSendsPerSecond: configuration.fcmMaxSendsPerSecond.map(Double.init))
        let sender = try FCMSender(configuration: fcm,
                                   logger: logger.child(label: "fcm"), metrics: metrics, onHealth: { state in
                                       switch state {
                                       case .ok: health.set(.fcm, .ok)
                                       case .paused(let fault, let reason): health.set(.fcm, .down("sending paused (\(fault.rawValue) fault): \(reason)"))
                                       }
                                   }, onCredentials: { status in
                                       switch status {
                                       case .ok: health.set(.fcmCredentials, .ok)
                                       case .failing(let reason): health.set(.fcmCredentials, .down(reason))
                                       }
                                   })
        let appStore = try AppStoreWiring.make(appStore: startup.appStore, configuration: configuration, logger: logger, metrics: metrics, onKeyStatus: { reason in
            health.set(.appStore, reason.map { .down($0) } ?? .ok)
        })
        health.set(.appStore, appStore == nil ? .disabled : .ok)
        let healthServer: HealthServer
        do {
            healthServer = try HealthServer(host: configuration.healthHost, port: configuration.healthPort, state: health, metrics: metrics)
        } catch {
            throw DaemonStartError(message: "HEALTH_ADDR \(configuration.healthHost):\(configuration.healthPort): \(error)")
        }
        if appStore == nil {
            logger.notice("App Store configuration absent: entitlement re-checks are off")
        }
        return DaemonParts(metrics: metrics, sender: sender, liveness: liveness, health: health, healthServer: healthServer,
                           notifier: SystemdNotifier(), appStore: appStore)
    }

    /// Sends a systemd notification (READY=1, STATUS=…, STOPPING=1); no-op outside systemd.
    func notify(_ state: String) { notifier.notify(state) }

    /// Updates a readiness check (`database`, `fcm_credentials`, `app_store`).
    func setCheck(_ check: ReadinessCheck, _ state: CheckState) { health.set(check, state) }
}

/// A runtime start failure (exit 1), e.g. the health address is in use.
struct DaemonStartError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// The entitlement re-checks and what they use: two pools of their own (row statements, lease
/// renewals) and an HTTP client; the daemon closes them after the service stopped.
struct AppStoreParts: Sendable {
    let rechecker: EntitlementRechecker
    /// The notification history poller, when APPSTORE_NOTIFICATION_HISTORY is on.
    let poller: NotificationHistoryPoller?
    let http: HTTPClient
    let database: PostgresClient
    let leaseConnection: PostgresClient

    func close() async {
        http.shutdown()
        await database.close()
        await leaseConnection.close()
    }
}

/// Builds the entitlement re-checks when App Store settings are present.
enum AppStoreWiring {
    /// `appStore`: the key and roots `StartupConfiguration` loaded (nil: re-checks off). `onKeyStatus`: Apple refusing
    /// our key (a reason) or accepting it again (nil), for `/readyz` `app_store`.
    static func make(appStore: AppStoreConfiguration?, configuration: Configuration, logger: Logger, metrics: MetricsRegistry,
                     onKeyStatus: @escaping @Sendable (String?) -> Void = { _ in }) throws -> AppStoreParts? {
        guard let appStore else { return nil }
        let http = try HTTPClient(configuration: EntitlementRechecker.httpConfiguration(for: appStore))
        // The worker's statement and lock timeouts, per transaction like the pipeline's; durable commits (revocations are money).
        let timeout = configuration.databaseStatementTimeout
        let database = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 4,
                                      settings: .worker(statementTimeout: timeout, lockTimeout: Supervisor.lockTimeout, asynchronousCommit: false),
                                      queryDeadline: timeout + timeout / 2)
        let leaseConnection = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 1, queryDeadline: timeout + timeout / 2)
        // The sweep and the notification poller, side by side over one shared context.
        let context = EntitlementContext(configuration: appStore, database: database, leaseConnection: leaseConnection, http: http,
                                         logger: logger.child(label: "appstore"), metrics: metrics, onKeyStatus: onKeyStatus)
        return AppStoreParts(rechecker: EntitlementRechecker(context: context), poller: NotificationHistoryPoller(context: context),
                             http: http, database: database, leaseConnection: leaseConnection)
    }
}
