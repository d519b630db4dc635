import Lifecycle
import Logging
import Outbox

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
        failures.set(0)
        onLive(live)
        return live
    }

    func rest(after round: Int?) async -> Duration { LiveInstances.heartbeatInterval }

    func roundFailed(_ error: any Error) {
        if failures.increment() == 1 { logger.warning("instance heartbeat failed", metadata: ["error": "\(error)"]) }
    }

    func finished() async { try? await instances.leave() }
}
