import Lifecycle
import Logging
import Timekeeping

/// One claimer's loop, as a service of the engine: claims whenever the event loop has room; after a claim that did
/// not fill its batch it rests until a wake-up (NOTIFY, freed capacity, settled events, a stop) or the poll interval;
/// a failed claim (the database down or failing over) is retried after a wake-up or the backoff, never ending the loop.
struct ClaimLoop: Service {
    let claimer: Claimer
    let engine: EngineLoop
    let wake: WakeSignal
    let configuration: DeliveryEngineConfiguration
    let logger: Logger
    let onProgress: @Sendable () -> Void

    /// Waits after consecutive failed claims: 200 ms, 400 ms, … 5 s.
    static let backoff = Backoff(base: .milliseconds(200), cap: .seconds(5))

    func run(until stop: StopSignal) async {
        var failures = 0
        while true {
            // Read before the stop check: a wake-up (a stop among them) that lands while this pass runs is never missed.
            let seen = wake.current
            if stop.isRequested { break }
            onProgress()
            // Room for a batch (at most half the high-water mark), so a backlog is claimed in full batches. Alive while it
            // waits: room may wait for FCM's answers, or for a database that is down to take their outcomes.
            let highWater = await engine.highWater
            while !stop.isRequested, !(await engine.waitForRoom(min(configuration.batchSize, highWater / 2), upTo: configuration.aliveEvery)) {
                onProgress()
            }
            if stop.isRequested { break }
            let limit = min(configuration.batchSize, max(1, highWater - (await engine.load)))
            do {
                let claim = try await aliveWhile { try await claimer.claim(limit: limit) }
                if claim.count > 0 { await engine.claimed(claim.groups, finished: claim.finished) }
                failures = 0
                if claim.count == limit { continue }
                await rest(after: seen, for: configuration.pollInterval, until: stop)
            } catch {
                failures += 1
                let delay = Self.backoff.delay(afterAttempt: failures, jitter: 1)
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("claim failed; retrying", metadata: ["error": "\(error)"])
                }
                await rest(after: seen, for: delay, until: stop)
            }
        }
    }
    /// Waits for a wake-up past `seen`, a stop or `duration`, saying it is alive every `aliveEvery` meanwhile (an idle
    /// queue under a long `POLL_INTERVAL_MS` is not a stuck loop).
    private func rest(after seen: UInt64, for duration: Duration, until stop: StopSignal) async {
        let end = ContinuousClock.now + duration
        while true {
            let left = end - .now
            guard left > .zero else { return }
            await wake.wait(after: seen, timeout: min(left, configuration.aliveEvery))
            if wake.current != seen || stop.isRequested { return }
            onProgress()
        }
    }

    /// Runs `body` (a claim: the pool's deadline bounds it), saying it is alive every `aliveEvery` until it returns: a
    /// database that does not answer is not a stuck loop, and a restart would not make it answer.
    private func aliveWhile<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let onProgress = self.onProgress
        let every = configuration.aliveEvery
        let beating = Task {
            while true {
                try await Task.sleep(for: every)
                onProgress()
            }
        }
        defer { beating.cancel() }
        return try await body()
    }
}
