import FCM
import Dispatch
import FoundationEssentials
import Glibc
import Lifecycle
import Logging
import Metrics
import OperatorCommands
import Outbox
import Postgres
import Schema
import Synchronization
import Systemd
import Timekeeping
import WorkerConfig

/// `medication-worker run`: wires configuration, database, FCM, health and the loops, and
/// turns SIGTERM/SIGINT into a graceful stop.
enum Daemon {
    static func run(environment: [String: String]) async -> Int32 {
        // Before any secret is read: a crash must not write the keys or DATABASE_URL to a core file.
        let coreDumpsOff = ProcessHardening.disableCoreDumps()
        // The same loader as `check-config`: the settings and every credential file, every problem named at once.
        let startup: StartupConfiguration
        do { startup = try StartupConfiguration.load(from: environment) } catch {
            // A misspelt name may be why a setting looks unset: the warnings go beside the errors, as check-config shows them.
            return WorkerApp.configurationFailed(error, warnings: SettingNames.nearMisses(in: environment))
        }
        let configuration = startup.configuration
        let logger = Logger(label: "medication-worker", logLevel: configuration.logLevel, sink: DaemonParts.logSink())
        if !coreDumpsOff { logger.warning("cannot turn core dumps off (prctl PR_SET_DUMPABLE, RLIMIT_CORE)") }
        for warning in startup.warnings {
            logger.warning("\(warning)", metadata: ["config.variable": warning.variable, "config.suggestion": warning.suggestion])
        }
        let parts: DaemonParts
        do {
            parts = try DaemonParts.make(startup: startup, logger: logger)
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            return WorkerApp.ExitStatus.failure
        }
        return await Supervisor(configuration: configuration, parts: parts, logger: logger).run()
    }
}

/// Runs the services until SIGTERM/SIGINT, then stops them within SHUTDOWN_TIMEOUT.
struct Supervisor {
    let configuration: Configuration
    let parts: DaemonParts
    let logger: Logger

    func run() async -> Int32 {
        let runner = makeRunner()
        let pools = DaemonPools(configuration: configuration)
        parts.liveness.beat("outbox")
        parts.liveness.beat("status")
        // The first access token is fetched at start, not by the first push: `/readyz` `fcm_credentials` then tells
        // at once whether Google accepts the service account (a refusal is backed off and reported, never fatal).
        let sender = parts.sender
        Task { try? await sender.checkCredentials() }
        // READY=1 only once the database answers with the current schema.
        guard await waitForDatabase(pools.pipeline, stop: runner.shutdown) else {
            logger.notice("stopped before the database became available")
            return WorkerApp.ExitStatus.ok
        }
        let services = makeServices(pools: pools)
        parts.notify("READY=1")
        logger.notice("medication-worker ready", metadata: [
            "version": WorkerApp.version, "health.addr": "\(configuration.healthHost):\(configuration.healthPort)",
            "app_store": parts.appStore == nil ? "disabled" : "enabled",
            "https.proxy": configuration.httpsProxy.map { "\(ValueParsing.redactConninfo($0.url)) (\($0.variable))" } ?? "none",
            "listen.via": "\(listenMode)",
            "listen.note": configuration.databaseListenURL == nil
                ? "notifications need a direct connection; behind a transaction pooler set DATABASE_LISTEN_URL (the poll delivers meanwhile)"
                : "direct connection for notifications",
        ])
        await runner.run(services)
        parts.sender.shutdown()
        await parts.appStore?.close()
        await pools.close()
        logger.notice("medication-worker stopped")
        return WorkerApp.ExitStatus.ok
    }

    /// SIGTERM/SIGINT: log, tell systemd, arm the last resort, and give the services 70% of
    /// SHUTDOWN_TIMEOUT (a margin inside it to write results and release leases).
    private func makeRunner() -> ServiceRunner {
        let logger = logger
        let parts = parts
        let timeout = configuration.shutdownTimeout
        return ServiceRunner(grace: timeout * 0.7, onSignal: { name in
            logger.notice("stopping", metadata: ["signal": name])
            parts.notify("STOPPING=1")
            Self.exitAtDeadline(timeout * 0.95, logger: logger)
        }, onFailure: { service, error in
            logger.error("service failed; stopping", metadata: ["service": "\(type(of: service))", "error": "\(error)"])
        })
    }

    /// The daemon as a list, in start order; the runner stops it from the bottom up.
    private func makeServices(pools: DaemonPools) -> [any Service] {
        // `work` wakes one claimer per NOTIFY (and on settled events); the engine wakes all on stop.
        let work = WakeSignal()
        let liveness = parts.liveness
        var engineConfiguration = DeliveryEngineConfiguration()
        engineConfiguration.batchSize = configuration.batchSize
        // MAX_IN_FLIGHT holds sends from their start until their outcome is written (the bound on unwritten
        // outcomes); at most half of them are on the wire, so sending goes on while the other half's outcomes are written.
        engineConfiguration.maxInFlight = configuration.maxInFlight
        engineConfiguration.maxSending = configuration.maxSending
        engineConfiguration.pollInterval = configuration.pollInterval
        engineConfiguration.lease = configuration.leaseDuration
        engineConfiguration.maxAttempts = configuration.maxAttempts
        engineConfiguration.eventMaxAge = configuration.eventMaxAge
        let loops: [(any Service)?] = [
            DeliveryEngine(client: pools.pipeline, sender: parts.sender, configuration: engineConfiguration,
                           logger: logger.child(label: "outbox"), metrics: parts.metrics, wake: work,
                           onProgress: { liveness.beat("outbox") }),
            Pruner(client: pools.maintenance,
                   configuration: .init(outboxRetention: configuration.outboxRetention, deliveryRetention: configuration.deliveryRetention),
                   logger: logger.child(label: "retention"), metrics: parts.metrics),
            StatusRefresher(gauges: QueueGauges(client: pools.maintenance, metrics: parts.metrics), parts: parts, logger: logger),
            Watchdog(parts: parts, logger: logger),
            InstanceHeartbeat(instances: LiveInstances(client: pools.maintenance), logger: logger, onLive: budgetShare),
            parts.appStore?.rechecker,
            parts.appStore?.poller,
        ]
        return [
            listener(waking: work),  // stopped last: it only wakes the claimers
            parts.healthServer,      // /healthz, /readyz, /metrics answer until the loops are done
            ConcurrentServices(loops.compactMap { $0 }),  // one stop, one deadline for every loop
        ]
    }

    /// Splits `FCM_MAX_SENDS_PER_SECOND` among the live instances at every heartbeat (nothing to split without it).
    private var budgetShare: @Sendable (Int) -> Void {
        guard let budget = configuration.fcmMaxSendsPerSecond else { return { _ in } }
        let share = SendBudgetShare(budget: budget, sender: parts.sender, logger: logger.child(label: "fcm"))
        return { live in share.live(live) }
    }

    private var listenMode: String { configuration.databaseListenURL == nil ? "DATABASE_URL" : "DATABASE_LISTEN_URL" }

    /// LISTEN needs a session of its own: a transaction pooler cannot deliver notifications, so an operator
    /// behind one sets DATABASE_LISTEN_URL to a direct connection. Without it the poll still delivers everything.
    private func listener(waking work: WakeSignal) -> PostgresListener {
        let logger = logger
        let listenMode = listenMode
        return PostgresListener(conninfo: configuration.databaseListenURL ?? configuration.databaseURL,
                                channel: Migrations.notifyChannel,
                                onWake: { work.wake() },
                                onError: { error in logger.warning("LISTEN connection lost; reconnecting",
                                                                   metadata: ["error": Supervisor.loggable(error), "listen.via": "\(listenMode)"]) })
    }

    /// A statement that waits this long behind someone else's lock gives up and is retried later.
    static let lockTimeout = Duration.seconds(5)

    /// The last resort of SIGTERM: when loops are still blocked after `deadline` (a database that
    /// stopped answering mid-statement holds a libpq call that no timeout on our side can end sooner),
    /// log what happens and exit 0 so systemd never has to SIGKILL. Leases of unfinished work expire and
    /// another instance takes it over.
    static func exitAtDeadline(_ deadline: Duration, logger: Logger) {
        let seconds = deadline.asSeconds
        DispatchQueue.global().asyncAfter(deadline: DispatchTime.now() + seconds) {
            logger.error("shutdown deadline passed with work still blocked (database not answering?); exiting",
                         metadata: ["shutdown.deadline_seconds": "\(seconds)"])
            fflush(nil)
            _exit(WorkerApp.ExitStatus.ok)
        }
    }

    /// What `/readyz` says about a database error: its kind and SQLSTATE, never libpq's or the server's text (which
    /// can quote a connection string); the journal has the rest.
    static func readiness(of error: any Error) -> String {
        if let error = error as? PostgresError { return error.summary + " (details in the journal)" }
        return loggable(error)
    }

    /// An error for the journal: libpq's text through the redaction check-config uses.
    static func loggable(_ error: any Error) -> String { ValueParsing.redactConninfo("\(error)") }

    /// Waits until the database answers and is migrated; retries with backoff, logging each problem once a while.
    private func waitForDatabase(_ database: PostgresClient, stop: StopSignal) async -> Bool {
        var attempt = 0
        while !stop.isRequested {
            do {
                // A connection attempt to a database that hangs lasts up to connect_timeout; SIGTERM does not wait for it.
                guard let missing = try await stop.unlessStopped({ try await database.withConnection { try Migrator.missingVersions($0) } })
                else { return false }
                if missing.isEmpty {
                    parts.setCheck(.database, .ok)
                    return true
                }
                let problem = "schema versions \(missing.map(String.init).joined(separator: ", ")) not applied: run `medication-worker migrate`"
                parts.setCheck(.database, .down(problem))
                if attempt % 30 == 0 { logger.error("database is not migrated", metadata: ["error": problem]) }
            } catch {
                parts.setCheck(.database, .down(Self.readiness(of: error)))
                if attempt % 30 == 0 { logger.warning("database unavailable; retrying", metadata: ["error": Self.loggable(error)]) }
            }
            attempt += 1
            parts.notify("STATUS=waiting for the database")
            try? await Task.sleep(for: .seconds(1))
        }
        return false
    }
}

/// The listener as one of the daemon's services: the wrapper module knows nothing of the service lifecycle.
extension PostgresListener: Service {
    /// Listens from start to `stop`; the thread has closed its connection when this returns.
    public func run(until stop: StopSignal) async {
        start()
        await stop.wait()
        self.stop()
    }
}

