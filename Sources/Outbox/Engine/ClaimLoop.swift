import Lifecycle
import Logging
import Synchronization
import Timekeeping

/// One claimer's loop, as a service of the engine: claims whenever the event loop has room, woken by NOTIFY, freed
/// capacity, settled events and the poll; a failed claim (the database down or failing over) is retried with backoff,
/// never ending the loop.
struct ClaimLoop: Service {
    let claimer: Claimer
    let engine: EngineLoop
    let wake: WakeSignal
    let configuration: DeliveryEngineConfiguration
    let logger: Logger
    /// Where the loop waits after a claim that did not fill its batch, or failed; false ends the loop. The daemon's
    /// (`waitForWork`) waits for a wake-up, the poll or the backoff and never ends it.
    let rest: Rest
    let onProgress: @Sendable () -> Void
    /// Events claimed so far (every loop of one engine run adds to it).
    let claimed: Tally

    /// A count several loops add to.
    final class Tally: Sendable {
        private let count = Mutex(0)
        func add(_ value: Int) { count.withLock { $0 += value } }
        var value: Int { count.withLock { $0 } }
    }

    /// Why the loop rests: a claim found fewer events than it asked for, or the claim failed (the `failures`th time
    /// in a row; `delay` is the backoff).
    enum Pause: Sendable {
        case short(claimed: Int)
        case failed(failures: Int, delay: Duration)
    }

    /// A rest: the pause, the engine loop the claims go to, and the wake-up generation seen before the claim.
    typealias Rest = @Sendable (_ pause: Pause, _ engine: EngineLoop, _ seen: UInt64) async -> Bool

    /// The daemon's rest: until a wake-up (NOTIFY, freed capacity, settled events, a stop) or the poll interval, and
    /// after a failed claim until a wake-up or the backoff.
    static func waitForWork(_ wake: WakeSignal, pollInterval: Duration) -> Rest {
        { pause, _, seen in
            switch pause {
            case .short: await wake.wait(after: seen, timeout: pollInterval)
            case .failed(_, let delay): await wake.wait(after: seen, timeout: delay)
            }
            return true
        }
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
                guard await rest(.short(claimed: claim.count), engine, seen) else { break }
            } catch {
                failures += 1
                let delay = Self.backoff.delay(afterAttempt: failures, jitter: 1)
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("claim failed; retrying", metadata: ["error": "\(error)"])
                }
                guard await rest(.failed(failures: failures, delay: delay), engine, seen) else { break }
            }
        }
    }
}
