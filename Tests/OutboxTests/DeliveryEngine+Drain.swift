import Lifecycle
@testable import Outbox

extension DeliveryEngine {
    /// Processes due events until none is left and nothing is in progress, then returns the number of events claimed:
    /// the engine's own stages, run until idle instead of until a stop (a tests' entry point, not the daemon's).
    @discardableResult
    func drain() async throws -> Int {
        await runStages(untilIdle: true, stop: StopSignal())
    }
}
