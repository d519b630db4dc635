/// Sends per second as a `Duration` and back: the pacing values count in fractional seconds.
extension Duration {
    /// `seconds` fractional seconds, rounded up to the nanosecond (a wait is never shorter than asked).
    static func fractionalSeconds(_ seconds: Double) -> Duration {
        .nanoseconds(Int64((max(0, seconds) * 1e9).rounded(.up)))
    }
}

/// A token bucket: `rate` tokens a second, at most `burst` kept. A value; its owner (`SendGateStateMachine`) serialises it and
/// holds a send whose `take` answered a wait. A rate of 0 holds every send (an instance with no share of the budget
/// yet) until the rate is raised.
package struct TokenBucket: Sendable, Equatable {
    /// Tokens added per second (0, or at least `minimumRate`).
    package private(set) var rate: Double
    /// The most tokens kept, so the most sends that leave at once after a quiet spell (≥ 1).
    package private(set) var burst: Double
    package private(set) var tokens: Double
    /// When `tokens` was last brought up to date (nil: never used; the bucket starts full, or empty at rate 0).
    private var updated: ContinuousClock.Instant?

    package init(rate: Double, burst: Double) {
        self.rate = Self.clamped(rate)
        self.burst = max(1, burst)
        tokens = self.rate > 0 ? self.burst : 0
    }

    /// The slowest rate a bucket runs at other than 0 (one send every 100 s).
    package static let minimumRate = 0.01
    /// How often a held bucket (rate 0) is asked again; raising the rate releases the line at once anyway.
    package static let heldRecheck = Duration.seconds(1)

    /// `rate` as a bucket runs it: 0 holds, anything else is at least `minimumRate`.
    package static func clamped(_ rate: Double) -> Double { rate > 0 ? max(rate, minimumRate) : 0 }

    /// The burst that goes with a rate: 10 ms of sends, at least 1 and at most 20 (FCM's quota is per minute; a
    /// proxy that enforces it per second tolerates a small burst, and nginx's `burst=100` tolerates several
    /// instances' together).
    package static func burst(forRate rate: Double) -> Double { min(20, max(1, rate / 100)) }

    /// Takes one token at `now`: nil when one was there (taken), else how long until one is (nothing taken).
    package mutating func take(now: ContinuousClock.Instant) -> Duration? {
        refill(now)
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        guard rate > 0 else { return Self.heldRecheck }
        return .fractionalSeconds((1 - tokens) / rate)
    }

    /// A new rate (and burst) from `now` on; the tokens already earned are kept, up to the new burst (none at rate 0:
    /// the share they were earned under is given up).
    package mutating func setRate(_ rate: Double, burst: Double, now: ContinuousClock.Instant) {
        refill(now)
        self.rate = Self.clamped(rate)
        self.burst = max(1, burst)
        tokens = self.rate > 0 ? min(tokens, self.burst) : 0
    }

    private mutating func refill(_ now: ContinuousClock.Instant) {
        if let updated, now > updated {
            tokens = min(burst, tokens + rate * (now - updated).asSeconds)
        }
        if updated.map({ now > $0 }) ?? true { updated = now }
    }
}

/// Sends started over the last few seconds, in 100 ms slots: the rate that hit FCM's quota when a 429 comes.
package struct SendRateMeter: Sendable, Equatable {
    package static let slot = Duration.milliseconds(100)
    package static let slots = 30
    /// The window the rate is measured over.
    package static var window: Duration { slot * slots }

    private var counts = [Int](repeating: 0, count: slots)
    /// The absolute slot number (since `origin`) of each entry of `counts`, so stale entries are told apart.
    private var numbers = [Int64](repeating: -1, count: slots)
    private let origin: ContinuousClock.Instant

    package init(origin: ContinuousClock.Instant = .now) { self.origin = origin }

    private func number(_ now: ContinuousClock.Instant) -> Int64 {
        let elapsed = now - origin
        guard elapsed > .zero else { return 0 }
        return Int64(elapsed / Self.slot)
    }

    /// One send started at `now`.
    package mutating func record(now: ContinuousClock.Instant) {
        let number = self.number(now)
        let index = Int(number % Int64(Self.slots))
        if numbers[index] != number {
            numbers[index] = number
            counts[index] = 0
        }
        counts[index] += 1
    }

    /// Sends per second over the window, measured from the start of the oldest slot with a send in it (at least one
    /// slot long): a burst that began a moment ago is not averaged over seconds it did not send in.
    package func rate(now: ContinuousClock.Instant) -> Double {
        let current = number(now)
        var total = 0
        var oldest = current
        for index in 0..<Self.slots where numbers[index] > current - Int64(Self.slots) && numbers[index] <= current && counts[index] > 0 {
            total += counts[index]
            oldest = min(oldest, numbers[index])
        }
        guard total > 0 else { return 0 }
        let span = max(now - (origin + Self.slot * oldest), Self.slot)
        return Double(total) / span.asSeconds
    }
}

/// The send-rate cap this instance applies (docs/operations.md, "FCM's project quota"): its share of
/// `FCM_MAX_SENDS_PER_SECOND`, and below it an adaptive cap after FCM answered the project's QUOTA_EXCEEDED —
/// multiplicative decrease to a rate below the one that hit the quota, additive increase for every second without one.
/// A value: every input is a method, `cap` is the answer; `SendGateStateMachine` owns it.
package struct SendRateLimit: Sendable, Equatable {
    /// The rate after a quota 429 is this fraction of the rate that hit the quota.
    package static let decrease = 0.7
    /// Without another 429 the cap climbs back to `plateau` times the rate that hit the quota over `climb`, then ten
    /// times slower up to that rate (where the quota was met), then at the first pace again (the quota may have been
    /// raised). A climb straight back to the rate that hit the quota met it again every `climb` and paused 60 s each
    /// time: three pauses in a 300,000-send backlog at a quota of 1,000/s.
    package static let climb = Duration.seconds(300)
    package static let plateau = 0.95
    /// The adaptive cap is lifted once it climbs to this multiple of the rate that hit the quota (the quota was raised).
    package static let lift = 2.0

    /// This instance's share of the project's budget (nil: no budget configured).
    package private(set) var budget: Double?
    /// The cap since the last quota 429 (nil: none).
    package private(set) var adaptive: Double?
    /// The rate that hit the quota (the measured send rate, or the cap when lower).
    package private(set) var hitRate: Double?
    /// Climbing starts from here (nil while paused: it starts when sending resumes).
    private var climbedAt: ContinuousClock.Instant?

    package init(budget: Double? = nil) { self.budget = budget.map(TokenBucket.clamped) }

    /// The sends per second allowed now; nil: no cap.
    package var cap: Double? {
        switch (budget, adaptive) {
        case let (budget?, adaptive?): min(budget, adaptive)
        case let (budget?, nil): budget
        case let (nil, adaptive?): adaptive
        case (nil, nil): nil
        }
    }

    /// The rate to resume at after a quota 429 while sending at `measured` per second under `cap`.
    package static func decreased(measured: Double, cap: Double?) -> Double {
        max(TokenBucket.minimumRate, decrease * min(measured, cap ?? measured))
    }

    /// The additive step per second after a quota 429 at `hitRate`: at the plateau after `climb`.
    package static func step(hitRate: Double) -> Double { hitRate * (plateau - decrease) / climb.asSeconds }

    /// `rate` after `seconds` whole seconds without a 429; nil when that lifts the cap (at or above the budget, or
    /// `lift` times the rate that hit the quota).
    package static func increased(_ rate: Double, hitRate: Double, seconds: Int, budget: Double?) -> Double? {
        let fast = step(hitRate: hitRate)
        var raised = rate
        var left = Double(seconds)
        for (until, step) in [(hitRate * plateau, fast), (hitRate, fast / 10), (Double.infinity, fast)] where raised < until && left > 0 {
            let needed = (until - raised) / step
            if needed >= left {
                raised += step * left
                left = 0
            } else {
                raised = until
                left -= needed
            }
        }
        if let budget, raised >= budget { return nil }
        return raised >= hitRate * lift ? nil : raised
    }

    /// The instance's share of the budget changed (nil: no budget; 0: none of it free yet, every send held).
    package mutating func setBudget(_ budget: Double?) {
        self.budget = budget.map(TokenBucket.clamped)
        if let budget = self.budget, let adaptive, adaptive >= budget { self.adaptive = nil }
    }

    /// FCM answered the project's QUOTA_EXCEEDED while sending at `measured` per second: decrease, and stop climbing
    /// until sending resumes.
    package mutating func quotaExceeded(measured: Double) {
        let hit = min(measured, cap ?? measured)
        hitRate = max(hit, TokenBucket.minimumRate)
        adaptive = Self.decreased(measured: measured, cap: cap)
        climbedAt = nil
    }

    /// Sending resumed after a pause: the climb starts now.
    package mutating func resumed(now: ContinuousClock.Instant) {
        if adaptive != nil { climbedAt = now }
    }

    /// Climbs one step for every whole second since the last step; returns true when the cap changed.
    package mutating func climb(now: ContinuousClock.Instant) -> Bool {
        guard let adaptive, let hitRate, let from = climbedAt, now - from >= .seconds(1) else { return false }
        let seconds = Int((now - from).components.seconds)
        climbedAt = from + .seconds(seconds)
        self.adaptive = Self.increased(adaptive, hitRate: hitRate, seconds: seconds, budget: budget)
        if self.adaptive == nil {
            self.hitRate = nil
            climbedAt = nil
        }
        return true
    }
}
