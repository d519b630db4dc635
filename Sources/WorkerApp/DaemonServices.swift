import FCM
import FoundationEssentials
import Health
import Lifecycle
import Logging
import Outbox
import Postgres
import Synchronization
import WorkerConfig

/// The daemon's PostgreSQL pools, built once and closed after the services stopped.
struct DaemonPools: Sendable {
    /// Two claimers, the completer and the lease heartbeat; each holds a connection only for one statement or transaction.
    let pipeline: PostgresClient
    /// Retention and the status gauges: short statements, off the pipeline's connections.
    let maintenance: PostgresClient

    init(configuration: Configuration) {
        // Every transaction carries its settings (pooler-safe: nothing is set on the session), among them
        // synchronous_commit=off for the pipeline's own writes: a worker crash loses nothing (commits are in
        // PostgreSQL), and a PostgreSQL crash can only forget that a push went out, so it is sent again
        // (a duplicate, never a loss: the API's outbox INSERT keeps its own durable commit).
        let statementTimeout = configuration.databaseStatementTimeout
        let settings = TransactionSettings.worker(statementTimeout: statementTimeout, lockTimeout: Supervisor.lockTimeout,
                                                  asynchronousCommit: true)
        // A server that stops answering never enforces statement_timeout: the pools end such calls themselves.
        let deadline = statementTimeout + statementTimeout / 2
        pipeline = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 6, settings: settings, queryDeadline: deadline)
        maintenance = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 2, settings: settings, queryDeadline: deadline)
    }

    /// Closes the idle connections (after every service returned).
    func close() async {
        await pipeline.close()
        await maintenance.close()
    }
}

/// Every few seconds: queue gauges, readiness of the database, and the systemd STATUS= line.
/// On stop it gives the `status` lease up so another instance takes over at once.
struct StatusRefresher: PeriodicJob {
    let gauges: QueueGauges
    let parts: DaemonParts
    let logger: Logger
    /// Consecutive failed refreshes (the first is logged; readiness and STATUS= report every one).
    private let failures = SharedCount()

    /// A database that has not answered the refresh within this is reported not ready (a black-holed path would
    /// otherwise take the pool's deadline, 45 s, to notice).
    static let probeTimeout = Duration.seconds(3)

    /// The refresh, waited for while the loop stays alive: its answer is taken the moment it comes; readiness turns
    /// down once it has taken `probeTimeout`; a stop ends the wait.
    private func refresh(until stop: StopSignal) async throws -> QueueGauges.Snapshot? {
        // No answer within the probe timeout: readiness turns down, and the loop keeps saying it is alive (it is the
        // database that does not answer; a restart would not help) until the answer or a stop.
        let parts = self.parts
        let probe = Task {
            try await Task.sleep(for: Self.probeTimeout)
            guard !Task.isCancelled else { return }
            parts.setCheck(.database, .down("no answer from the database within \(Self.probeTimeout)"))
            parts.notify("STATUS=database not answering")
            while true {
                parts.liveness.beat("status")
                try await Task.sleep(for: .seconds(1))
            }
        }
        // The probe's last word comes before the caller's: a `.down` it was writing cannot land after the caller's `.ok`.
        func endProbe() async {
            probe.cancel()
            _ = await probe.result
        }
        let gauges = self.gauges
        do {
            let snapshot = try await stop.unlessStopped { try await gauges.refresh() }  // nil: a stop came first
            await endProbe()
            return snapshot
        } catch {
            await endProbe()
            throw error
        }
    }

    // A periodic job: a refresh every 5 s, the database check and STATUS= from its outcome.
    func runOnce(until stop: StopSignal) async throws -> QueueGauges.Snapshot? {
        // After every round, whatever its outcome: the loop is alive, and memory freed since is given back.
        defer {
            parts.liveness.beat("status")
            ProcessMetrics.returnFreeMemory()
        }
        guard let status = try await refresh(until: stop) else { return nil }
        parts.setCheck(.database, .ok)
        failures.withLock { $0 = 0 }
        let sent = parts.metrics.value("push_deliveries_total", labels: ["result": "sent"]) ?? 0
        parts.notify("STATUS=sent \(Int(sent)), backlog \(status.events[.pending] ?? 0), dead \(status.events[.dead] ?? 0)")
        return status
    }

    func rest(after round: QueueGauges.Snapshot??) async -> Duration { .seconds(5) }

    func roundFailed(_ error: any Error) {
        let failures = failures.withLock { count in
            count += 1
            return count
        }
        parts.setCheck(.database, .down(Supervisor.readiness(of: error)))
        parts.notify("STATUS=database unavailable: retrying")
        if failures == 1 { logger.warning("database check failed", metadata: ["error": Supervisor.loggable(error)]) }
    }

    func finished() async { await gauges.release() }
}

/// Pings the systemd watchdog at half its interval while every loop makes progress; returns at
/// once when systemd set no watchdog.
struct Watchdog: PeriodicJob {
    let parts: DaemonParts
    let logger: Logger
    /// Whether the stall was already reported (one critical line per stall, not one per round).
    private let warned = SharedFlag()

    func run(until stop: StopSignal) async {
        guard parts.notifier.watchdogInterval != nil else { return }
        await runRounds(until: stop)
    }

    func runOnce(until stop: StopSignal) async throws {
        let stalled = parts.liveness.stalled()
        if stalled.isEmpty {
            parts.notify("WATCHDOG=1")
            warned.set(false)
        } else if !warned.set(true) {
            logger.critical("loops stalled; withholding watchdog pings", metadata: ["stalled": stalled.joined(separator: ",")])
        }
    }

    func rest(after round: Void?) async -> Duration { (parts.notifier.watchdogInterval ?? .seconds(10)) / 2 }

    func roundFailed(_ error: any Error) {}
}

/// A flag several rounds of a job share.
final class SharedFlag: Sendable {
    private let value = Mutex(false)

    /// Sets the flag; returns what it was.
    @discardableResult
    func set(_ new: Bool) -> Bool { value.withLock { old in defer { old = new }; return old } }
}

/// This instance's share of `FCM_MAX_SENDS_PER_SECOND`: the budget split evenly among
/// the live instances, handed to the sender at every heartbeat; logged when it changes.
struct SendBudgetShare: Sendable {
    let budget: Int
    let sender: FCMSender
    let logger: Logger
    private let lastLive = SharedCount()

    init(budget: Int, sender: FCMSender, logger: Logger) {
        self.budget = budget
        self.sender = sender
        self.logger = logger
    }

    /// Each instance's sends per second when `live` instances share the budget.
    static func share(of budget: Int, live: Int) -> Double { Double(budget) / Double(max(1, live)) }

    func live(_ live: Int) {
        let share = Self.share(of: budget, live: live)
        sender.setSendBudget(perSecond: share)
        let changed = lastLive.withLock { last in
            defer { last = live }
            return last != live
        }
        if changed {
            logger.info("FCM send budget shared", metadata: [
                "fcm.budget": "\(budget)/s", "instances.live": "\(live)", "fcm.send_rate_limit": "\(Int(share.rounded(.down)))/s",
            ])
        }
    }
}

/// A count several rounds of a job share.
final class SharedCount: Sendable {
    private let value = Mutex(0)

    func withLock<T>(_ body: (inout Int) -> T) -> T { value.withLock { body(&$0) } }
}

/// Keeps this process's row in the live-instances table: `status` lists it, and the FCM budget is shared
/// among the rows. A clean stop deletes the row so the others take its share at once.
struct InstanceHeartbeat: PeriodicJob {
    let instances: LiveInstances
    let logger: Logger
    /// Hears how many instances are live (this one included) after every heartbeat.
    var onLive: @Sendable (Int) -> Void = { _ in }
    /// Consecutive failed heartbeats (the first is logged; the database check reports the outage).
    private let failures = SharedCount()

    func runOnce(until stop: StopSignal) async throws -> Int {
        let live = try await instances.heartbeat(version: WorkerApp.version)
        failures.withLock { $0 = 0 }
        onLive(live)
        return live
    }

    func rest(after round: Int?) async -> Duration { LiveInstances.heartbeatInterval }

    func roundFailed(_ error: any Error) {
        let count = failures.withLock { count in
            count += 1
            return count
        }
        if count == 1 { logger.warning("instance heartbeat failed", metadata: ["error": "\(error)"]) }
    }

    func finished() async { try? await instances.leave() }
}
