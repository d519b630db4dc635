import FoundationEssentials
import Synchronization

/// Spreads one environment's requests evenly at `rate` per second (one slot every 1/rate, no bursts) and
/// holds them all while Apple's 429 pause lasts. Shared by the sweep and the notification history poller.
public final class RatePacer: Sendable {
    /// Requests per second.
    public let rate: Double
    let spacing: Duration
    private let state = Mutex(State())

    /// The reservation state: where the next slot starts and the pause.
    public struct State: Sendable {
        /// The earliest instant the next slot may start.
        public var next: ContinuousClock.Instant?
        /// No request before this instant (Apple's Retry-After, or our own JWT refused).
        public var pausedUntil: ContinuousClock.Instant?
        /// When the last request actually started (a task may wake after its slot).
        public var lastStart: ContinuousClock.Instant?
        public init() {}
    }

    public init(rate: Double) {
        self.rate = rate
        spacing = .nanoseconds(Int64((1e9 / max(rate, 0.001)).rounded(.up)))
    }

    /// The slot a request reserved at `now` gets, and the state after it: slots are `spacing` apart and never inside a pause.
    public static func reserve(_ state: inout State, now: ContinuousClock.Instant, spacing: Duration) -> ContinuousClock.Instant {
        var slot = max(now, state.next ?? now)
        if let paused = state.pausedUntil, paused > slot { slot = paused }
        state.next = slot + spacing
        return slot
    }

    /// Waits for this request's slot. Returns false, without a slot, when the environment is paused or the task is cancelled
    /// (the caller gives its work back rather than holding it through a pause).
    ///
    /// Starts stay `spacing` apart even when a task wakes late for its slot (a loaded machine): a late
    /// starter followed at once by an on-time one would put two requests where Apple counts one.
    public func acquire() async -> Bool {
        let spacing = self.spacing
        while true {
            if isPaused { return false }
            let slot = state.withLock { Self.reserve(&$0, now: .now, spacing: spacing) }
            do { try await Task.sleep(until: slot, clock: .continuous) } catch { return false }
            if isPaused || Task.isCancelled { return false }
            let started = state.withLock { state -> Bool in
                let now = ContinuousClock.now
                if let last = state.lastStart, now - last < spacing { return false }
                state.lastStart = now
                return true
            }
            if started { return true }
        }
    }

    /// Pauses every request of this environment until `instant` (a later pause wins).
    public func pause(until instant: ContinuousClock.Instant) {
        state.withLock { state in
            if state.pausedUntil.map({ $0 < instant }) ?? true { state.pausedUntil = instant }
        }
    }

    /// Pauses until a wall-clock time (Apple's Retry-After), at least a second and at most an hour from now.
    public func pause(untilDate date: Date?) {
        let seconds = min(3600, max(1, (date ?? Date().addingTimeInterval(60)).timeIntervalSinceNow))
        pause(until: .now + .milliseconds(Int64(seconds * 1000)))
    }

    /// The end of the current pause, if one is in force.
    public var pausedUntil: ContinuousClock.Instant? {
        state.withLock { state in state.pausedUntil.flatMap { $0 > .now ? $0 : nil } }
    }

    var isPaused: Bool { pausedUntil != nil }
}
