import Dispatch
import FoundationEssentials
import Logging
import Metrics
import Synchronization
import Timekeeping

/// What kind of fault paused sending (the `fcm.fault` log field and the metric label).
public enum FCMFault: String, Sendable, CaseIterable {
    /// 403 without SENDER_ID_MISMATCH, SENDER_ID_MISMATCH from most devices (a wrong key), an answer that is not
    /// Google's JSON error, a 401 that persists after a refresh.
    case project
    /// 429 or 5xx: FCM is overloaded or down.
    case overload
    /// No HTTP answer: connect, TLS, timeout, reset.
    case connection
}

/// FCM's health as the sender sees it, for `/readyz`'s `fcm` check.
public enum FCMHealth: Sendable, Equatable {
    case ok
    /// Sending is paused for a fault; `reason` is what FCM (or the path to it) answered.
    case paused(FCMFault, reason: String)
}

/// Pauses sending as a whole when FCM fails for the project rather than for a device (SPEC §3
/// "Project-wide faults pause the sender"): a project fault pauses at once, overload and connection
/// failures after `threshold` consecutive faults. A pause lasts `Retry-After` when FCM gave one, else a
/// capped, jittered backoff (at least `minimumPause` when the fault asks for one: 60 s for the project's
/// QUOTA_EXCEEDED without Retry-After); then one probe goes out, and its success releases everything held. Sends
/// held meanwhile are not attempts: they have not left.
///
/// While open, sends are paced (SPEC §3 "FCM's project quota"): a `TokenBucket` at the `SendRateLimit`'s cap (the
/// instance's share of `FCM_MAX_SENDS_PER_SECOND`, lowered after a quota 429 and climbing back); a send without a
/// token waits in line and a timer releases the line as tokens come, a few milliseconds' worth at a time.
final class SendGate: Sendable {
    /// A send held while paused: `run` transmits it (with the ticket its answer must quote), `drop`
    /// answers it without sending (stop).
    struct Held: Sendable {
        var run: @Sendable (_ ticket: UInt64) -> Void
        var drop: @Sendable () -> Void
    }

    private enum Phase {
        case open
        case paused
        /// The pause is over: the next send is the probe; others wait for its answer.
        case probing(inFlight: Bool)
    }

    private struct State {
        var phase = Phase.open
        var consecutiveFaults = 0
        var pauses = 0
        var held: [Held] = []
        var episode: (fault: FCMFault, reason: String, since: ContinuousClock.Instant)?
        /// Identifies the probe's answer (sends started before the pause may still be answering).
        var probeTicket: UInt64 = 0
        var nextTicket: UInt64 = 0

        var limit = SendRateLimit()
        /// The pace at `limit.cap`; nil: no cap.
        var bucket: TokenBucket?
        /// The cap `bucket` was last set to (the gauge's value).
        var appliedCap: Double?
        var meter = SendRateMeter()
        /// Sends waiting for a token while open, oldest first; a timer is armed whenever there are any.
        var paced: [Held] = []
        /// The armed timer's number: a timer whose number is not this one was replaced (a new cap) and does nothing.
        var timer: UInt64?
        var timers: UInt64 = 0

        /// Arms a new timer (replacing any): its number.
        mutating func armTimer() -> UInt64 {
            timers &+= 1
            timer = timers
            return timers
        }

        /// Brings the bucket to `limit.cap`; returns the new cap (0: none) when it changed.
        mutating func applyCap(now: ContinuousClock.Instant) -> Double? {
            let cap = limit.cap
            guard cap != appliedCap else { return nil }
            appliedCap = cap
            if let cap {
                if bucket == nil {
                    bucket = TokenBucket(rate: cap, burst: TokenBucket.burst(forRate: cap))
                } else {
                    bucket?.setRate(cap, burst: TokenBucket.burst(forRate: cap), now: now)
                }
            } else {
                bucket = nil
            }
            return cap ?? 0
        }

        /// The adaptive cap's climb for the seconds since its last step; returns the new cap when it changed.
        mutating func climb(now: ContinuousClock.Instant) -> Double? {
            limit.climb(now: now) ? applyCap(now: now) : nil
        }

        /// Takes a token for a send that may leave now: nil when it may, else the wait (the send must wait in line).
        mutating func take(now: ContinuousClock.Instant) -> Duration? {
            guard bucket != nil else { return nil }
            return bucket!.take(now: now)
        }

        /// A send leaves: its ticket.
        mutating func started(now: ContinuousClock.Instant) -> UInt64 {
            meter.record(now: now)
            nextTicket &+= 1
            return nextTicket
        }
    }

    /// What `submit` does once the state is updated.
    private enum Start {
        case run(ticket: UInt64, probe: Bool)
        /// Waits in line for a token; timer number `timer.number` is armed for `timer.after` when none was.
        case paced(timer: (number: UInt64, after: Duration)?)
        case held
    }

    /// The shortest timer between releases of paced sends (a few milliseconds' worth of tokens go out per release).
    static let timerQuantum = Duration.milliseconds(5)

    /// Consecutive overload/connection faults that open a pause.
    let threshold: Int
    let maxBackoff: Duration
    private let state = Mutex(State())
    private let logger: Logger
    private let onHealth: @Sendable (FCMHealth) -> Void
    private let onResume: @Sendable () -> Void
    private let paused: Gauge
    private let probes: Counter
    private let faults: [FCMFault: Counter]
    private let rateLimit: Gauge
    private let quotaExceeded: Counter
    private let rateWaits: Counter

    /// `onResume` hears that a probe succeeded and sending resumed, before the held sends go out. `budget` is this
    /// instance's share of the project's sends per second (nil: no cap until a quota 429).
    init(threshold: Int, maxBackoff: Duration = .seconds(10), budget: Double? = nil, logger: Logger, metrics: MetricsRegistry,
         onHealth: @escaping @Sendable (FCMHealth) -> Void, onResume: @escaping @Sendable () -> Void = {}) {
        self.threshold = max(1, threshold)
        self.maxBackoff = maxBackoff
        self.logger = logger
        self.onHealth = onHealth
        self.onResume = onResume
        paused = metrics.gauge("fcm_send_paused", help: "1 while sending to FCM is paused for a project-wide fault.")
        probes = metrics.counter("fcm_probes_total", help: "Single requests sent to learn whether FCM recovered from a pause.")
        rateLimit = metrics.gauge("fcm_send_rate_limit",
                                  help: "The sends per second this instance allows itself (its share of FCM_MAX_SENDS_PER_SECOND, lower after FCM's project quota was hit); 0: no cap.")
        quotaExceeded = metrics.counter("fcm_quota_exceeded_total", help: "FCM answers of 429 QUOTA_EXCEEDED for the project's quota (not one device's).")
        rateWaits = metrics.counter("fcm_send_rate_waits_total", help: "Sends that waited for the send-rate cap before leaving.")
        var faults: [FCMFault: Counter] = [:]
        for fault in FCMFault.allCases {
            faults[fault] = metrics.counter("fcm_faults_total", help: "FCM answers that were faults of the project, overload or the connection, by kind.",
                                            labels: ["kind": fault.rawValue])
        }
        self.faults = faults
        let cap = state.withLock { state in
            state.limit.setBudget(budget)
            return state.applyCap(now: .now)
        }
        rateLimit.set(cap ?? 0)
    }

    /// Runs `held.run` now, or when a token comes, or holds it until the pause ends.
    func submit(_ held: Held) {
        let now = ContinuousClock.now
        let (start, cap) = state.withLock { state -> (Start, Double?) in
            let cap = state.climb(now: now)
            switch state.phase {
            case .open:
                // Behind sends already waiting for a token, in order.
                if !state.paced.isEmpty {
                    state.paced.append(held)
                    return (.paced(timer: nil), cap)
                }
                if let wait = state.take(now: now) {
                    state.paced.append(held)
                    return (.paced(timer: (state.armTimer(), wait)), cap)
                }
                return (.run(ticket: state.started(now: now), probe: false), cap)
            case .probing(inFlight: false):
                _ = state.take(now: now)
                state.phase = .probing(inFlight: true)
                state.probeTicket = state.started(now: now)
                return (.run(ticket: state.probeTicket, probe: true), cap)
            case .paused, .probing(inFlight: true):
                state.held.append(held)
                return (.held, cap)
            }
        }
        if let cap { rateLimit.set(cap) }
        switch start {
        case .run(let ticket, let probe):
            if probe { probes.increment() }
            held.run(ticket)
        case .paced(let timer):
            rateWaits.increment()
            if let timer { releasePaced(timer: timer.number, after: timer.after) }
        case .held:
            break
        }
    }

    /// Arms timer `number`, which releases paced sends.
    private func releasePaced(timer number: UInt64, after wait: Duration) {
        DispatchQueue.global().asyncAfter(deadline: .now() + max(wait, Self.timerQuantum).asSeconds) { [self] in
            releasePaced(timer: number)
        }
    }

    /// Timer `number`: the paced sends that have a token now leave, in order; a timer is armed again for the rest.
    private func releasePaced(timer number: UInt64) {
        let now = ContinuousClock.now
        let (released, next, cap) = state.withLock { state -> ([(Held, UInt64)], (number: UInt64, after: Duration)?, Double?) in
            guard state.timer == number else { return ([], nil, nil) }
            state.timer = nil
            let cap = state.climb(now: now)
            // Paused since: `fault` moved the line to the held sends.
            guard case .open = state.phase else { return ([], nil, cap) }
            var released: [(Held, UInt64)] = []
            var next: (number: UInt64, after: Duration)?
            for held in state.paced {
                if let wait = state.take(now: now) {
                    next = (state.armTimer(), wait)
                    break
                }
                released.append((held, state.started(now: now)))
            }
            state.paced.removeFirst(released.count)
            return (released, next, cap)
        }
        if let cap { rateLimit.set(cap) }
        if let next { releasePaced(timer: next.number, after: next.after) }
        for (held, ticket) in released { held.run(ticket) }
    }

    /// This instance's share of the project's sends per second (nil: none), from the live-instances heartbeat. Sends
    /// waiting in line move at the new pace at once.
    func setBudget(_ perSecond: Double?) {
        let (cap, timer) = state.withLock { state -> (Double?, UInt64?) in
            state.limit.setBudget(perSecond)
            let cap = state.applyCap(now: .now)
            guard cap != nil, !state.paced.isEmpty, case .open = state.phase else { return (cap, nil) }
            return (cap, state.armTimer())
        }
        if let cap { rateLimit.set(cap) }
        if let timer { releasePaced(timer: timer, after: .zero) }
    }

    /// The sends per second allowed now (nil: no cap), and the pacing state behind it.
    var rateLimitState: SendRateLimit { state.withLock { $0.limit } }

    /// An answer that shows FCM works for the project (success, or a device-level answer).
    func healthy(ticket: UInt64) {
        let (released, recovered) = state.withLock { state -> ([Held], (fault: FCMFault, reason: String, since: ContinuousClock.Instant)?) in
            state.consecutiveFaults = 0
            guard case .probing(inFlight: true) = state.phase, ticket == state.probeTicket else { return ([], nil) }
            state.phase = .open
            state.pauses = 0
            // A lowered send-rate cap climbs back from now.
            state.limit.resumed(now: .now)
            let released = state.held
            state.held.removeAll()
            defer { state.episode = nil }
            return (released, state.episode)
        }
        if let recovered {
            onResume()
            paused.set(0)
            onHealth(.ok)
            logger.notice("FCM answers again; sending resumed", metadata: [
                "fcm.fault": recovered.fault.rawValue, "fcm.paused_for": "\(ContinuousClock.now - recovered.since)",
                "fcm.released": "\(released.count)",
            ])
        }
        for item in released { submit(item) }
    }

    /// A fault answer. Returns how long sending pauses (nil when it does not). Without `retryAfter` the pause lasts at
    /// least `minimumPause`. `quota`: the project's QUOTA_EXCEEDED; when it opens a pause from open sending, the
    /// send-rate cap drops below the rate that hit the quota.
    @discardableResult
    func fault(_ kind: FCMFault, reason: String, retryAfter: Duration?, minimumPause: Duration? = nil, quota: Bool = false,
               ticket: UInt64) -> Duration? {
        faults[kind]?.increment()
        if quota { quotaExceeded.increment() }
        let now = ContinuousClock.now
        let (delay, newEpisode, cap) = state.withLock { state -> (Duration?, Bool, Double?) in
            state.consecutiveFaults += 1
            var cap: Double?
            switch state.phase {
            case .open:
                guard kind == .project || state.consecutiveFaults >= threshold else { return (nil, false, nil) }
                if quota {
                    state.limit.quotaExceeded(measured: state.meter.rate(now: now))
                    cap = state.applyCap(now: now)
                }
            case .probing(inFlight: true) where ticket == state.probeTicket:
                break
            case .paused, .probing:
                // An answer to a send that left before the pause: the pause already accounts for it.
                return (nil, false, nil)
            }
            state.pauses += 1
            state.phase = .paused
            // Sends waiting for a token wait for the pause's end instead (nothing else is held while open).
            state.held = state.paced + state.held
            state.paced.removeAll()
            let newEpisode = state.episode == nil
            if newEpisode { state.episode = (kind, reason, now) }
            return (pauseLength(retryAfter: retryAfter, pauses: state.pauses, minimum: minimumPause), newEpisode, cap)
        }
        if let cap {
            rateLimit.set(cap)
            logger.warning("FCM's project quota exceeded; sending resumes below the rate that hit it", metadata: [
                "fcm.send_rate_limit": "\(Int(cap.rounded()))/s",
            ])
        }
        guard let delay else { return nil }
        paused.set(1)
        if newEpisode {
            onHealth(.paused(kind, reason: reason))
            let metadata: LogMetadata = ["fcm.fault": kind.rawValue, "fcm.error": reason, "fcm.pause": "\(delay)"]
            if kind == .project {
                logger.error("FCM refuses the project; sending paused, nothing disabled; operator action needed", metadata: metadata)
            } else {
                logger.warning("FCM is failing for every send; sending paused", metadata: metadata)
            }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.asSeconds) { [self] in endPause() }
        return delay
    }

    private func pauseLength(retryAfter: Duration?, pauses: Int, minimum: Duration?) -> Duration {
        if let retryAfter { return min(max(retryAfter, .milliseconds(100)), .seconds(300)) }
        // 1 s, 2 s, 4 s … up to `maxBackoff`, jittered; never shorter than the fault asks.
        return max(Backoff(base: .seconds(1), cap: maxBackoff).delay(afterAttempt: pauses), minimum ?? .zero)
    }

    /// The pause is over: one held send goes out as the probe.
    private func endPause() {
        let probe = state.withLock { state -> Held? in
            guard case .paused = state.phase else { return nil }
            state.phase = .probing(inFlight: false)
            guard !state.held.isEmpty else { return nil }
            return state.held.removeFirst()
        }
        if let probe { submit(probe) }
    }

    /// Answers every held send without transmitting it (stop).
    func dropHeld() {
        let held = state.withLock { state in
            defer {
                state.held.removeAll()
                state.paced.removeAll()
            }
            return state.paced + state.held
        }
        for item in held { item.drop() }
    }
}
