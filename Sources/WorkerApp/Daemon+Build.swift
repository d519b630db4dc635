import FCM
import Health
import HTTP
import Lifecycle
import Logging
import Metrics
import Outbox
import Postgres
import Schema
import Systemd
import WorkerConfig

extension Daemon {
    /// The one builder: every part and every service from what `StartupConfiguration` loaded and checked (no credential
    /// file is read again). Nothing runs yet; a part that cannot be made (the health address in use) throws.
    static func build(startup: StartupConfiguration, logger: Logger) throws -> Daemon {
        let configuration = startup.configuration
        let metrics = MetricsRegistry()
        ProcessMetrics.register(in: metrics)
        let http = HTTPClientConfiguration(maxInFlight: configuration.maxSending, connectTimeout: .seconds(10),
                                           requestTimeout: .seconds(15), caFile: configuration.tlsCAFile)
        // A loop that makes no progress for this long counts as stuck: watchdog pings stop, /healthz says so.
        let health = HealthState(liveness: Liveness(stallAfter: .seconds(25)))
        health.set(.database, .down("not checked yet"))
        health.set(.fcmCredentials, .ok)
        health.set(.fcm, .ok)
        let pools = DaemonPools(configuration: configuration)
        let sender = try fcmSender(startup, http: http, health: health, knownGood: KnownGoodTokens(client: pools.maintenance),
                                   logger: logger, metrics: metrics)
        let appStore = try startup.appStore.map { appStore in
            try AppStoreServices(configuration: appStore, worker: configuration, logger: logger, metrics: metrics, onKeyStatus: { reason in
                health.set(.appStore, reason.map { .down($0) } ?? .ok)
            })
        }
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
        let notifier = SystemdNotifier()

        // `work` wakes one claimer per NOTIFY (and on settled events); the engine wakes all on stop.
        let work = WakeSignal()
        let liveness = health.liveness
        let loops: [(any Service)?] = [
            DeliveryEngine(client: pools.pipeline, sender: sender, configuration: engineConfiguration(configuration),
                           logger: logger.child(label: "outbox"), metrics: metrics, wake: work,
                           onProgress: { liveness.beat("outbox") }),
            Pruner(client: pools.maintenance,
                   configuration: .init(outboxRetention: configuration.outboxRetention, deliveryRetention: configuration.deliveryRetention),
                   logger: logger.child(label: "retention"), metrics: metrics),
            StatusRefresher(gauges: QueueGauges(client: pools.maintenance, metrics: metrics), health: health, notifier: notifier,
                            metrics: metrics, logger: logger),
            Watchdog(liveness: liveness, notifier: notifier, logger: logger),
            InstanceHeartbeat(instances: LiveInstances(client: pools.maintenance), logger: logger,
                              share: configuration.fcmMaxSendsPerSecond.map {
                                  SendBudgetShare(budget: $0, sender: sender, logger: logger.child(label: "fcm"))
                              }),
            appStore?.rechecker,
            appStore?.poller,
        ]
        let services: [any Service] = [
            listener(configuration, waking: work, logger: logger),  // stopped last: it only wakes the claimers
            healthServer,                                          // /healthz, /readyz, /metrics answer until the loops are done
            ConcurrentServices(loops.compactMap { $0 }),           // one stop, one deadline for every loop
        ]
        return Daemon(configuration: configuration, logger: logger, metrics: metrics, sender: sender, health: health,
                      notifier: notifier, pools: pools, appStore: appStore, services: services)
    }

    /// The FCM sender, reporting its health (paused, credentials failing) to `/readyz`. With a budget, every send is held
    /// until the first heartbeat has taken this instance's share of it (instances that start together must not each
    /// take the whole budget before they see each other).
    /// A disabling answer no 200 witnessed is checked with a dry run to `knownGood`'s tokens.
    private static func fcmSender(_ startup: StartupConfiguration, http: HTTPClientConfiguration, health: HealthState,
                                  knownGood: KnownGoodTokens, logger: Logger, metrics: MetricsRegistry) throws -> FCMSender {
        let configuration = startup.configuration
        let fcm = FCMConfiguration(serviceAccount: startup.serviceAccount, baseURL: configuration.fcmBaseURL, http: http,
                                   maxSendsPerSecond: configuration.fcmMaxSendsPerSecond.map { _ in 0 },
                                   knownGoodTokens: { suspects in
                                       await knownGood.newest(excluding: suspects).map { found in
                                           WitnessCandidates(tokens: found.tokens,
                                                             unwitnessedAllowanceLeft: found.unwitnessedDisables < OutboxStore.unwitnessedDisableCap)
                                       }
                                   })
        return try FCMSender(configuration: fcm, logger: logger.child(label: "fcm"), metrics: metrics, onHealth: { state in
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
    }

    /// The engine's settings. MAX_IN_FLIGHT holds sends from their start until their outcome is written (the bound on
    /// unwritten outcomes); at most half of them are on the wire, so sending goes on while the other half's are written.
    private static func engineConfiguration(_ configuration: Configuration) -> DeliveryEngineConfiguration {
        var engine = DeliveryEngineConfiguration()
        engine.batchSize = configuration.batchSize
        engine.maxInFlight = configuration.maxInFlight
        engine.maxSending = configuration.maxSending
        engine.pollInterval = configuration.pollInterval
        engine.lease = configuration.leaseDuration
        engine.maxAttempts = configuration.maxAttempts
        engine.eventMaxAge = configuration.eventMaxAge
        return engine
    }

    /// LISTEN needs a session of its own: a transaction pooler cannot deliver notifications, so an operator
    /// behind one sets DATABASE_LISTEN_URL to a direct connection. Without it the poll still delivers everything.
    private static func listener(_ configuration: Configuration, waking work: WakeSignal, logger: Logger) -> PostgresListener {
        let listenMode = listenMode(configuration)
        return PostgresListener(conninfo: configuration.databaseListenURL ?? configuration.databaseURL,
                                channel: Migrations.notifyChannel,
                                onWake: { work.wake() },
                                onError: { error in logger.warning("LISTEN connection lost; reconnecting",
                                                                   metadata: ["error": Daemon.loggable(error), "listen.via": "\(listenMode)"]) })
    }
}
