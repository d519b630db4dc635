import Lifecycle
import Logging
import Synchronization
import Timekeeping

/// One claimer's loop, as a service of the engine: claims whenever the event loop has room, woken by NOTIFY, freed
/// capacity, settled events and the poll; a failed claim (the database down or failing over) is retried with backoff,
/// never ending the loop. With `untilIdle` (tests and tools) it returns once nothing is due and nothing is in
/// progress, and gives up after a few failed claims.
struct ClaimLoop: Service {
    let claimer: Claimer
    let engine: EngineLoop
    let wake: WakeSignal
    let configuration: DeliveryEngineConfiguration
    let logger: Logger
    let untilIdle: Bool
    let onProgress: @Sendable () -> Void
    /// Events claimed so far (every loop of one engine run adds to it).
    let claimed: Tally

    /// A count several loops add to.
    final class Tally: Sendable {
        private let count = Mutex(0)
        func add(_ value: Int) { count.withLock { $0 += value } }
        var value: Int { count.withLock { $0 } }
    }

    /// Waits after consecutive failed claims: 200 ms, 400 ms, … 5 s.
    static let backoff = Backoff(base: .milliseconds(200), cap: .seconds(5))

    func run(until stop: StopSignal) async {
        var failures = 0
        while true {
            // Read before the stop check: a wake-up (a stop among them) that lands while this pass runs is never missed.
            let seen = wake.current
            if stop.isRequested { break }
            onProgress()
            // Room for a batch (at most half the high-water mark), so a backlog is claimed in full batches.
            let highWater = await engine.highWater
            await engine.waitForRoom(min(configuration.batchSize, highWater / 2))
            if stop.isRequested { break }
            let limit = min(configuration.batchSize, max(1, highWater - (await engine.load)))
            do {
                let claim = try await claimer.claim(limit: limit)
                if claim.count > 0 { await engine.claimed(claim.groups, finished: claim.finished) }
                claimed.add(claim.count)
                failures = 0
                if claim.count == limit { continue }
                if untilIdle {
                    if claim.count == 0, await engine.groupCount == 0 { break }
                    await engine.waitUntilIdle()
                    continue
                }
                await wake.wait(after: seen, timeout: configuration.pollInterval)
            } catch {
                failures += 1
                let delay = Self.backoff.delay(afterAttempt: failures, jitter: 1)
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("claim failed; retrying", metadata: ["error": "\(error)"])
                }
                if untilIdle && failures > 3 { break }
                await wake.wait(after: seen, timeout: delay)
            }
        }
    }
}
