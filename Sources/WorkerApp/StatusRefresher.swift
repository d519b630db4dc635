import Health
import Lifecycle
import Logging
import Metrics
import Outbox
import Systemd

/// Every few seconds: queue gauges, readiness of the database, and the systemd STATUS= line.
/// On stop it gives the `status` lease up so another instance takes over at once.
struct StatusRefresher: PeriodicJob {
    let gauges: QueueGauges
    /// The database check and the `status` loop's heartbeat.
    let health: HealthState
    let notifier: SystemdNotifier
    let metrics: MetricsRegistry
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
        let health = self.health
        let notifier = self.notifier
        let probe = Task {
            try await Task.sleep(for: Self.probeTimeout)
            guard !Task.isCancelled else { return }
            health.set(.database, .down("no answer from the database within \(Self.probeTimeout)"))
            notifier.notify("STATUS=database not answering")
            while true {
                health.liveness.beat("status")
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
            health.liveness.beat("status")
            ProcessMetrics.returnFreeMemory()
        }
        guard let status = try await refresh(until: stop) else { return nil }
        health.set(.database, .ok)
        failures.set(0)
        let sent = metrics.value("push_deliveries_total", labels: ["result": "sent"]) ?? 0
        notifier.notify("STATUS=sent \(Int(sent)), backlog \(status.events[.pending] ?? 0), dead \(status.events[.dead] ?? 0)")
        return status
    }

    func rest(after round: QueueGauges.Snapshot??) async -> Duration { .seconds(5) }

    func roundFailed(_ error: any Error) {
        let failures = failures.increment()
        health.set(.database, .down(Daemon.readiness(of: error)))
        notifier.notify("STATUS=database unavailable: retrying")
        if failures == 1 { logger.warning("database check failed", metadata: ["error": Daemon.loggable(error)]) }
    }

    func finished() async { await gauges.release() }
}
