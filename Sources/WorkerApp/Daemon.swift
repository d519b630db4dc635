import FCM
import Foundation
import Logging
import Metrics
import Outbox
import Postgres
import Schema
import Synchronization
import WorkerConfig

/// `medication-worker run`: wires configuration, database, FCM, health and the loops, and
/// turns SIGTERM/SIGINT into a graceful stop.
enum Daemon {
    /// Loads and fully validates the configuration, including credential files.
    static func loadConfiguration(environment: [String: String]) throws(ConfigurationError) -> Configuration {
        try Configuration.load(from: environment)
    }

    static func run(environment: [String: String]) async -> Int32 {
        let configuration: Configuration
        do { configuration = try loadConfiguration(environment: environment) } catch {
            return WorkerApp.configurationFailed(error)
        }
        let logger = Logger(label: "medication-worker", logLevel: configuration.logLevel, sink: DaemonParts.logSink())
        let parts: DaemonParts
        do {
            parts = try DaemonParts.make(configuration: configuration, logger: logger)
        } catch let error as ConfigurationError {
            return WorkerApp.configurationFailed(error)
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            return WorkerApp.ExitStatus.failure
        }
        return await Supervisor(configuration: configuration, parts: parts, logger: logger).run()
    }
}

/// Runs the loops until SIGTERM/SIGINT, then stops them within SHUTDOWN_TIMEOUT.
struct Supervisor {
    let configuration: Configuration
    let parts: DaemonParts
    let logger: Logger

    func run() async -> Int32 {
        let stop = StopSignal()
        // Two signals: `work` wakes one claimer per NOTIFY; `wake` paces the other loops and both wake on stop.
        let work = WakeSignal()
        let wake = WakeSignal()
        // Two claimers, the completer and the lease heartbeat; each holds a connection only for one statement or transaction.
        // Every transaction carries its settings (pooler-safe: nothing is set on the session), among them
        // synchronous_commit=off for the pipeline's own writes: a worker crash loses nothing (commits are in
        // PostgreSQL), and a PostgreSQL crash can only forget that a push went out, so it is sent again
        // (a duplicate, never a loss: the API's outbox INSERT keeps its own durable commit).
        let statementTimeout = configuration.databaseStatementTimeout
        let settings = TransactionSettings.worker(statementTimeout: statementTimeout, lockTimeout: Self.lockTimeout,
                                                  asynchronousCommit: true)
        let deadline = statementTimeout + statementTimeout / 2
        let database = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 6, settings: settings, queryDeadline: deadline)
        // Retention and the status gauges: short statements, off the pipeline's connections.
        let maintenance = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 2, settings: settings, queryDeadline: deadline)
        let liveness = parts.liveness
        liveness.beat("outbox")
        liveness.beat("status")
        let signals = SignalWatcher { name in
            logger.notice("stopping", metadata: ["signal": name])
            parts.notify("STOPPING=1")
            // Leave a margin inside SHUTDOWN_TIMEOUT to write results and release leases.
            stop.request(grace: configuration.shutdownTimeout * 0.7)
            work.wakeAll()
            wake.wakeAll()
            Self.exitAtDeadline(configuration.shutdownTimeout * 0.95, logger: logger)
        }
        defer { withExtendedLifetime(signals) {} }

        // READY=1 only once the database answers with the current schema.
        guard await waitForDatabase(database, stop: stop) else {
            logger.notice("stopped before the database became available")
            return WorkerApp.ExitStatus.ok
        }

        // LISTEN needs a session of its own: a transaction pooler cannot deliver notifications, so an operator
        // behind one sets DATABASE_LISTEN_URL to a direct connection. Without it the poll still delivers everything.
        let listenMode = configuration.databaseListenURL == nil ? "DATABASE_URL" : "DATABASE_LISTEN_URL"
        let listener = PostgresListener(conninfo: configuration.databaseListenURL ?? configuration.databaseURL,
                                        channel: Migrations.notifyChannel,
                                        onWake: { work.wake() },
                                        onError: { error in logger.warning("LISTEN connection lost; reconnecting",
                                                                           metadata: ["error": "\(error)", "listen.via": "\(listenMode)"]) })
        listener.start()
        defer { listener.stop() }

        var workerConfiguration = DeliveryEngineConfiguration()
        workerConfiguration.batchSize = configuration.batchSize
        workerConfiguration.maxInFlight = configuration.maxInFlight
        workerConfiguration.pollInterval = configuration.pollInterval
        workerConfiguration.lease = configuration.leaseDuration
        workerConfiguration.maxAttempts = configuration.maxAttempts
        workerConfiguration.eventMaxAge = configuration.eventMaxAge
        let worker = DeliveryEngine(client: database, sender: parts.sender, configuration: workerConfiguration,
                                  logger: logger.child(label: "outbox"), metrics: parts.metrics, wake: work, stop: stop,
                                  onProgress: { liveness.beat("outbox") })
        let pruner = Pruner(client: maintenance,
                            configuration: .init(outboxRetention: configuration.outboxRetention,
                                                 deliveryRetention: configuration.deliveryRetention),
                            logger: logger.child(label: "retention"), metrics: parts.metrics)
        let gauges = QueueGauges(client: maintenance, metrics: parts.metrics)

        parts.notify("READY=1")
        logger.notice("medication-worker ready", metadata: [
            "version": WorkerApp.version, "health.addr": "\(configuration.healthHost):\(configuration.healthPort)",
            "app_store": configuration.appStore == nil ? "disabled" : "enabled",
            "listen.via": "\(listenMode)",
            "listen.note": configuration.databaseListenURL == nil
                ? "notifications need a direct connection; behind a transaction pooler set DATABASE_LISTEN_URL (the poll delivers meanwhile)"
                : "direct connection for notifications",
        ])

        await withTaskGroup(of: Void.self) { group in
            group.addTask { await worker.run() }
            group.addTask { await pruner.run(stop: stop, wake: wake) }
            group.addTask { await parts.runExtraLoops(stop: stop, wake: wake) }
            group.addTask { await parts.runWatchdog(stop: stop, wake: wake, logger: logger) }
            group.addTask {
                await Self.refreshStatus(gauges: gauges, parts: parts, stop: stop, wake: wake, logger: logger)
            }
            await group.waitForAll()
        }
        await gauges.release()
        parts.sender.shutdown()
        parts.healthServer.stop()
        logger.notice("medication-worker stopped")
        return WorkerApp.ExitStatus.ok
    }

    /// A statement that waits this long behind someone else's lock gives up and is retried later.
    static let lockTimeout = Duration.seconds(5)

    /// The last resort of SIGTERM: when loops are still blocked after `deadline` (a database that
    /// stopped answering mid-statement holds a libpq call that no timeout on our side can end sooner),
    /// log what happens and exit 0 so systemd never has to SIGKILL. Leases of unfinished work expire and
    /// another instance takes it over.
    static func exitAtDeadline(_ deadline: Duration, logger: Logger) {
        let seconds = Double(deadline.components.seconds) + Double(deadline.components.attoseconds) / 1e18
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            logger.error("shutdown deadline passed with work still blocked (database not answering?); exiting",
                         metadata: ["shutdown.deadline_seconds": "\(seconds)"])
            fflush(nil)
            _exit(WorkerApp.ExitStatus.ok)
        }
    }

    /// The result of `body`, or nil as soon as a stop is requested (`body` then finishes unobserved).
    static func unlessStopped<T: Sendable>(_ stop: StopSignal, _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        let outcome = Mutex<Result<T, any Error>?>(nil)
        let wake = WakeSignal()
        Task {
            let result: Result<T, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            wake.wakeAll()
        }
        while !stop.isRequested {
            if let result = outcome.withLock({ $0 }) { return try result.get() }
            await wake.wait(after: wake.current, timeout: .milliseconds(100))
        }
        return nil
    }

    /// Waits until the database answers and is migrated; retries with backoff, logging each problem once a while.
    private func waitForDatabase(_ database: PostgresClient, stop: StopSignal) async -> Bool {
        var attempt = 0
        while !stop.isRequested {
            do {
                // A connection attempt to a database that hangs lasts up to connect_timeout; SIGTERM does not wait for it.
                guard let missing = try await Self.unlessStopped(stop, { try await database.withConnection { try Migrator.missingVersions($0) } })
                else { return false }
                if missing.isEmpty {
                    parts.setCheck("database", "ok")
                    return true
                }
                let problem = "schema versions \(missing.map(String.init).joined(separator: ", ")) not applied: run `medication-worker migrate`"
                parts.setCheck("database", "down: \(problem)")
                if attempt % 30 == 0 { logger.error("database is not migrated", metadata: ["error": problem]) }
            } catch {
                parts.setCheck("database", "down: \(error)")
                if attempt % 30 == 0 { logger.warning("database unavailable; retrying", metadata: ["error": "\(error)"]) }
            }
            attempt += 1
            parts.notify("STATUS=waiting for the database")
            try? await Task.sleep(for: .seconds(1))
        }
        return false
    }

    /// Every few seconds: queue gauges, readiness of the database, and the systemd STATUS= line.
    static func refreshStatus(gauges: QueueGauges, parts: DaemonParts, stop: StopSignal, wake: WakeSignal, logger: Logger) async {
        var failures = 0
        while !stop.isRequested {
            do {
                let status = try await gauges.refresh()
                parts.setCheck("database", "ok")
                failures = 0
                let sent = parts.metrics.value("push_deliveries_total", labels: ["result": "sent"]) ?? 0
                parts.notify("STATUS=sent \(Int(sent)), backlog \(status.events["PENDING"] ?? 0), dead \(status.events["DEAD"] ?? 0)")
            } catch {
                failures += 1
                parts.setCheck("database", "down: \(error)")
                parts.notify("STATUS=database unavailable: retrying")
                if failures == 1 { logger.warning("database check failed", metadata: ["error": "\(error)"]) }
            }
            parts.liveness.beat("status")
            await wake.wait(after: wake.current, timeout: .seconds(5))
        }
    }
}
