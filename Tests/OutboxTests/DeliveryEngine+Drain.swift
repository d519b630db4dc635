import Lifecycle
@testable import Outbox
import Synchronization

extension DeliveryEngine {
    /// Processes due events until none is left and nothing is in progress, then returns the number of events claimed:
    /// the engine's own stages, whose claim loops rest until the engine is idle instead of waiting for work, and end
    /// once a claim finds nothing while the engine holds nothing, or after a few failed claims (a tests' entry point,
    /// not the daemon's). The last loop to end stops the stages at once: a write the database refuses meanwhile is
    /// given up (its leases expire and the work is retried) rather than retried for ever.
    @discardableResult
    func drain() async throws -> Int {
        let stop = StopSignal()
        let loops = max(1, configuration.claimers)
        let ended = Mutex(0)
        let wake = self.wake
        return await runStages(stop: stop, rest: { pause, engine, seen in
            let goesOn: Bool
            switch pause {
            case .short(let claimed):
                let idle = await engine.isIdle
                goesOn = claimed > 0 || !idle
                if goesOn { await engine.waitUntilIdle() }
            case .failed(let failures, let delay):
                goesOn = failures <= 3
                if goesOn { await wake.wait(after: seen, timeout: delay) }
            }
            if !goesOn, ended.withLock({ count in count += 1; return count }) == loops { stop.request(grace: .zero) }
            return goesOn
        })
    }
}

extension EngineLoop {
    /// The loop holds no group: nothing queued, sending or unwritten.
    var isIdle: Bool { machine.groups.isEmpty }

    /// Returns once nothing is held.
    func waitUntilIdle() async {
        while !machine.groups.isEmpty { try? await Task.sleep(for: .milliseconds(1)) }
    }
}
