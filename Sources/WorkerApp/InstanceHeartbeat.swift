import Lifecycle
import Logging
import Outbox

/// Keeps this process's row in the live-instances table: `status` lists it, and the FCM budget is shared among the
/// rows (`SendBudgetShare`). A clean stop deletes the row so the others take its share at once.
struct InstanceHeartbeat: PeriodicJob {
    let instances: LiveInstances
    let logger: Logger
    /// This instance's share of `FCM_MAX_SENDS_PER_SECOND` (nil: no budget).
    var share: SendBudgetShare?
    /// Consecutive failed heartbeats (the first is logged; the database check reports the outage).
    private let failures = SharedCount()
    /// Whether a heartbeat has succeeded yet.
    private let recorded = SharedFlag()

    init(instances: LiveInstances, logger: Logger, share: SendBudgetShare? = nil) {
        self.instances = instances
        self.logger = logger
        self.share = share
    }

    /// The pause before the next heartbeat while this instance waits for a share others still hold, or for its first.
    static let waitingInterval = Duration.seconds(1)

    func runOnce(until stop: StopSignal) async throws -> LiveInstances.Heartbeat {
        let share = self.share
        let heartbeat = try await instances.heartbeat(version: WorkerApp.version, budget: share.map { Double($0.budget) },
                                                      lowering: { share?.lower($0) })
        recorded.set(true)
        failures.set(0)
        share?.took(heartbeat)
        return heartbeat
    }

    func rest(after round: LiveInstances.Heartbeat?) async -> Duration {
        if let round { return round.waiting ? Self.waitingInterval : LiveInstances.heartbeatInterval }
        // Sends are held until the first share is recorded: ask again soon.
        let never = share != nil && !recorded.isSet
        return never ? Self.waitingInterval : LiveInstances.heartbeatInterval
    }

    func roundFailed(_ error: any Error) {
        if failures.increment() == 1 { logger.warning("instance heartbeat failed", metadata: ["error": "\(error)"]) }
    }

    func finished() async { try? await instances.leave() }
}
