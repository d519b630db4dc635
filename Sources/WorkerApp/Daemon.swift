import FCM
import Dispatch
import FoundationEssentials
import Glibc
import Health
import Lifecycle
import Logging
import Metrics
import Postgres
import Schema
import Systemd
import Timekeeping
import WorkerConfig

/// `medication-worker run`: the daemon. `run(environment:)` loads the configuration, `build` makes every part and the
/// services once, and `run()` runs them until SIGTERM/SIGINT, then stops them within SHUTDOWN_TIMEOUT.
struct Daemon: Sendable {
    /// The settings, loaded and checked before anything was built.
    let configuration: Configuration
    /// The daemon's logger; every part logs through a child of it.
    let logger: Logger
    /// Every part's series, served on `/metrics`.
    let metrics: MetricsRegistry
    /// The FCM sender the engine sends through; its first access token is fetched at start.
    let sender: FCMSender
    /// Readiness checks and the loops' heartbeats, as `/healthz` and `/readyz` report them.
    let health: HealthState
    /// sd_notify: READY=1, STATUS=…, STOPPING=1 (the watchdog pings through it too).
    let notifier: SystemdNotifier
    /// The PostgreSQL pools of the pipeline and of the maintenance loops, closed after the services stopped.
    let pools: DaemonPools
    /// The entitlement re-checks; nil when the App Store settings are absent.
    let appStore: AppStoreServices?
    /// The services in start order; the runner stops them from the bottom up.
    let services: [any Service]

    /// Loads and checks the configuration, builds the daemon and runs it; returns the exit status.
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
        // The log sink: journald when stderr is the journal, else key=value text.
        let logger = Logger(label: "medication-worker", logLevel: configuration.logLevel, sink: LogSinks.automatic())
        if !coreDumpsOff { logger.warning("cannot turn core dumps off (prctl PR_SET_DUMPABLE, RLIMIT_CORE)") }
        for warning in startup.warnings {
            logger.warning("\(warning)", metadata: ["config.variable": warning.variable, "config.suggestion": warning.suggestion])
        }
        let daemon: Daemon
        do {
            daemon = try build(startup: startup, logger: logger)
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            return WorkerApp.ExitStatus.failure
        }
        return await daemon.run()
    }

    /// Runs the services until SIGTERM/SIGINT, then closes what they used; returns the exit status.
    func run() async -> Int32 {
        let runner = makeRunner()
        health.liveness.beat("outbox")
        health.liveness.beat("status")
        // The first access token is fetched at start, not by the first push: `/readyz` `fcm_credentials` then tells
        // at once whether Google accepts the service account (a refusal is backed off and reported, never fatal).
        let sender = sender
        Task { try? await sender.checkCredentials() }
        // READY=1 only once the database answers with the current schema.
        guard await waitForDatabase(pools.pipeline, stop: runner.shutdown) else {
            logger.notice("stopped before the database became available")
            return WorkerApp.ExitStatus.ok
        }
        notifier.notify("READY=1")
        logger.notice("medication-worker ready", metadata: [
            "version": WorkerApp.version, "health.addr": "\(configuration.healthHost):\(configuration.healthPort)",
            "app_store": appStore == nil ? "disabled" : "enabled",
            "https.proxy": configuration.httpsProxy.map { "\(ValueParsing.redactSetting($0.url)) (\($0.variable))" } ?? "none",
            "listen.via": "\(Self.listenMode(configuration))",
            "listen.note": configuration.databaseListenURL == nil
                ? "notifications need a direct connection; behind a transaction pooler set DATABASE_LISTEN_URL (the poll delivers meanwhile)"
                : "direct connection for notifications",
        ])
        await runner.run(services)
        sender.shutdown()
        await appStore?.close()
        await pools.close()
        logger.notice("medication-worker stopped")
        return WorkerApp.ExitStatus.ok
    }

    /// SIGTERM/SIGINT: log, tell systemd, arm the last resort, and give the services 70% of
    /// SHUTDOWN_TIMEOUT (a margin inside it to write results and release leases).
    private func makeRunner() -> ServiceRunner {
        let logger = logger
        let notifier = notifier
        let timeout = configuration.shutdownTimeout
        return ServiceRunner(grace: timeout * 0.7, onSignal: { name in
            logger.notice("stopping", metadata: ["signal": name])
            notifier.notify("STOPPING=1")
            Self.exitAtDeadline(timeout * 0.95, logger: logger)
        }, onFailure: { service, error in
            logger.error("service failed; stopping", metadata: ["service": "\(type(of: service))", "error": "\(error)"])
        }, onHangup: {
            logger.notice("SIGHUP ignored: the configuration is read at start; `systemctl restart medication-worker` applies a change")
        })
    }

    /// Which setting the LISTEN connection comes from.
    static func listenMode(_ configuration: Configuration) -> String {
        configuration.databaseListenURL == nil ? "DATABASE_URL" : "DATABASE_LISTEN_URL"
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
                    health.set(.database, .ok)
                    return true
                }
                let problem = "schema versions \(missing.map(String.init).joined(separator: ", ")) not applied: run `medication-worker migrate`"
                health.set(.database, .down(problem))
                if attempt % 30 == 0 { logger.error("database is not migrated", metadata: ["error": problem]) }
            } catch {
                health.set(.database, .down(Self.readiness(of: error)))
                if attempt % 30 == 0 { logger.warning("database unavailable; retrying", metadata: ["error": Self.loggable(error)]) }
            }
            attempt += 1
            // The loops have not started: waiting for the database is not a stall (`/healthz` stays 200).
            health.liveness.beat("outbox")
            health.liveness.beat("status")
            notifier.notify("STATUS=waiting for the database")
            try? await Task.sleep(for: .seconds(1))
        }
        return false
    }
}
