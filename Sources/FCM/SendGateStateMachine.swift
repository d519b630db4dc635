import Timekeeping

/// The send gate's decisions as one value (the shape of postgres-nio's `ConnectionStateMachine`): every input is a
/// method that changes the state and returns the actions to take, in order. It calls nothing, reads no clock (every
/// input brings `now`), draws no random number (a fault brings its backoff jitter), holds no lock and arms no timer:
/// `SendGate` owns it and carries the actions out. `Send` is the owner's opaque send (a test uses a number).
///
/// Pauses (docs/operations.md, "When FCM fails"): a project fault pauses at once, overload and connection failures
/// after `threshold` consecutive faults. A pause lasts `Retry-After` when FCM gave one, else a capped, jittered backoff
/// (at least `minimumPause` when the fault asks for one: 60 s for the project's QUOTA_EXCEEDED without Retry-After);
/// then one probe goes out, and its success releases everything parked, in order. Sends parked meanwhile are not attempts:
/// they have not left. An answer whose ticket is not the probe's (a send that left before the pause) changes nothing
/// but the count of consecutive faults.
///
/// Pacing (docs/operations.md, "FCM's project quota"): while open, a `TokenBucket` at the `SendRateLimit`'s cap (the
/// instance's share of `FCM_MAX_SENDS_PER_SECOND`, lowered after a quota 429 and climbing back); a send without a token
/// waits in line and a pace timer releases the line as tokens come, a few milliseconds' worth at a time.
struct SendGateStateMachine<Send> {
    enum Phase: Sendable, Equatable {
        case open
        case paused
        /// The pause is over: the next send is the probe; others wait for its answer.
        case probing(inFlight: Bool)
    }

    enum Timer: Sendable, Equatable {
        /// The pause is over: `pauseEnded`.
        case pauseEnd
        /// Pace timer `number`: `paceTimerFired(number)`. A timer whose number is not the armed one was replaced.
        case pace(UInt64)
    }

    /// A log line the owner writes (it owns the wording and the level).
    enum Log: Sendable, Equatable {
        /// A quota 429 lowered the send-rate cap to `cap` per second.
        case quotaExceeded(cap: Double)
        /// A pause began an episode (the first pause since sending was last healthy).
        case paused(FCMFault, reason: String, pause: Duration)
        /// A probe succeeded: the episode that began with `fault` is over; `released` parked sends go out.
        case resumed(FCMFault, pausedFor: Duration, released: Int)
    }

    /// What the owner reports: `/readyz`'s health, a metric, a log line.
    enum Report: Sendable, Equatable {
        case health(FCMHealth)
        /// `fcm_send_paused{cause}`: 1 for the episode's cause while paused (nil: not paused).
        case paused(cause: String?)
        /// `fcm_send_rate_limit` (0: no cap).
        case rateLimit(Double)
        /// `fcm_faults_total{kind}`.
        case fault(FCMFault)
        /// `fcm_quota_exceeded_total`.
        case quotaAnswer
        /// `fcm_probes_total`.
        case probe
        /// `fcm_send_rate_waits_total`.
        case rateWait
        case log(Log)
    }

    enum Action {
        /// Transmit `send` now; its answer quotes `ticket`.
        case start(Send, ticket: UInt64)
        /// Call the timer's input after `after`.
        case schedule(Timer, after: Duration)
        /// Answer these sends without transmitting them (stop).
        case drop([Send])
        case report(Report)
    }

    /// The shortest pace timer (a few milliseconds' worth of tokens go out per release).
    static var timerQuantum: Duration { .milliseconds(5) }

    /// Consecutive overload/connection faults that open a pause.
    let threshold: Int
    let maxBackoff: Duration
    private(set) var phase = Phase.open
    private(set) var consecutiveFaults = 0
    /// Pauses since sending was last healthy: the backoff's exponent.
    private var pauses = 0
    /// Sends waiting for the pause (or the probe) to end, oldest first.
    private(set) var parked: [Send] = []
    /// Sends waiting for a token while open, oldest first; a pace timer is armed whenever there are any.
    private(set) var paced: [Send] = []
    private var episode: (fault: FCMFault, cause: String, reason: String, since: ContinuousClock.Instant)?
    /// Identifies the probe's answer (sends started before the pause may still be answering).
    private var probeTicket: UInt64 = 0
    private var nextTicket: UInt64 = 0

    private(set) var rateLimit = SendRateLimit()
    /// The pace at `rateLimit.cap`; nil: no cap.
    private var bucket: TokenBucket?
    /// The cap `bucket` was last set to (the gauge's value).
    private var appliedCap: Double?
    private var meter: SendRateMeter
    /// Answers that show FCM accepted a send (the rate FCM let through: at a quota 429, what the quota allows).
    private var accepted: SendRateMeter
    /// The armed pace timer's number.
    private var timer: UInt64?
    private var timers: UInt64 = 0

    /// `budget`: this instance's share of the project's sends per second (nil: no cap until a quota 429).
    init(threshold: Int, maxBackoff: Duration = .seconds(10), budget: Double? = nil, now: ContinuousClock.Instant) {
        self.threshold = max(1, threshold)
        self.maxBackoff = maxBackoff
        meter = SendRateMeter(origin: now)
        accepted = SendRateMeter(origin: now)
        rateLimit.setBudget(budget)
        _ = applyCap(now: now)
    }

    // MARK: Inputs

    /// A send to transmit: it starts now, or waits in line for a token, or is parked until the pause ends. The actions
    /// hold at most one `.start`, this send's.
    mutating func submit(_ send: Send, now: ContinuousClock.Instant) -> [Action] {
        var actions: [Action] = []
        submit(send, now: now, into: &actions)
        return actions
    }

    /// An answer that shows FCM works for the project (success, or a device-level answer). The probe's (`ticket`)
    /// ends the pause: sending resumes and the parked sends go out in order.
    mutating func answeredHealthy(ticket: UInt64, now: ContinuousClock.Instant) -> [Action] {
        consecutiveFaults = 0
        accepted.record(now: now)
        guard case .probing(inFlight: true) = phase, ticket == probeTicket else { return [] }
        phase = .open
        pauses = 0
        // A lowered send-rate cap climbs back from now.
        rateLimit.resumed(now: now)
        let released = parked
        parked.removeAll()
        var actions: [Action] = []
        if let episode {
            actions += [.report(.paused(cause: nil)), .report(.health(.ok)),
                        .report(.log(.resumed(episode.fault, pausedFor: now - episode.since, released: released.count)))]
            self.episode = nil
        }
        for send in released { submit(send, now: now, into: &actions) }
        return actions
    }

    /// A fault answer to the send with `ticket`. Without `retryAfter` a pause lasts at least `minimumPause`, else the
    /// backoff scaled by `jitter` (0.5…1). `quota`: the project's QUOTA_EXCEEDED; when it opens a pause from open
    /// sending, the send-rate cap drops below the rate that hit the quota. `cause` names the episode in
    /// `fcm_send_paused{cause}` (the disabling answer a known-good token got; default: the kind).
    mutating func fault(_ kind: FCMFault, reason: String, retryAfter: Duration?, minimumPause: Duration? = nil, quota: Bool = false,
                        cause: String? = nil, ticket: UInt64, jitter: Double, now: ContinuousClock.Instant) -> [Action] {
        var actions: [Action] = [.report(.fault(kind))]
        if quota { actions.append(.report(.quotaAnswer)) }
        consecutiveFaults += 1
        switch phase {
        case .open:
            guard kind == .project || consecutiveFaults >= threshold else { return actions }
            if quota {
                rateLimit.quotaExceeded(measured: rateAtQuota(now: now))
                if let cap = applyCap(now: now) { actions += [.report(.rateLimit(cap)), .report(.log(.quotaExceeded(cap: cap)))] }
            }
        case .probing(inFlight: true) where ticket == probeTicket:
            break
        case .paused, .probing:
            // An answer to a send that left before the pause: the pause already accounts for it.
            return actions
        }
        pauses += 1
        phase = .paused
        // Sends waiting for a token wait for the pause's end instead (nothing else is parked while open).
        parked = paced + parked
        paced.removeAll()
        let delay = pauseLength(retryAfter: retryAfter, minimum: minimumPause, jitter: jitter)
        if episode == nil {
            episode = (kind, cause ?? kind.rawValue, reason, now)
            actions += [.report(.paused(cause: cause ?? kind.rawValue)), .report(.health(.paused(kind, reason: reason))),
                        .report(.log(.paused(kind, reason: reason, pause: delay)))]
        } else {
            actions.append(.report(.paused(cause: episode!.cause)))
        }
        actions.append(.schedule(.pauseEnd, after: delay))
        return actions
    }

    /// The send with `ticket` ended without any answer (cancelled, shut down). When it was the probe, nothing would
    /// ever end the probing: the next parked send probes instead (or the next one submitted).
    mutating func abandoned(ticket: UInt64, now: ContinuousClock.Instant) -> [Action] {
        guard case .probing(inFlight: true) = phase, ticket == probeTicket else { return [] }
        phase = .probing(inFlight: false)
        guard !parked.isEmpty else { return [] }
        var actions: [Action] = []
        submit(parked.removeFirst(), now: now, into: &actions)
        return actions
    }

    /// The pause is over: the first parked send goes out as the probe (or the next send submitted, when none is parked).
    mutating func pauseEnded(now: ContinuousClock.Instant) -> [Action] {
        guard case .paused = phase else { return [] }
        phase = .probing(inFlight: false)
        guard !parked.isEmpty else { return [] }
        var actions: [Action] = []
        submit(parked.removeFirst(), now: now, into: &actions)
        return actions
    }

    /// Pace timer `number`: the paced sends that have a token now leave, in order; a timer is armed again for the rest.
    mutating func paceTimerFired(_ number: UInt64, now: ContinuousClock.Instant) -> [Action] {
        guard timer == number else { return [] }
        timer = nil
        var actions: [Action] = []
        climb(now: now, into: &actions)
        // Paused since: `fault` moved the line to the parked sends.
        guard case .open = phase else { return actions }
        var starts: [Action] = []
        for send in paced {
            if let wait = take(now: now) {
                actions.append(armTimer(after: wait))
                break
            }
            starts.append(.start(send, ticket: started(now: now)))
        }
        paced.removeFirst(starts.count)
        return actions + starts
    }

    /// This instance's share of the project's sends per second (nil: none), from the live-instances heartbeat. Sends
    /// waiting in line move at the new pace at once.
    mutating func budgetChanged(perSecond: Double?, now: ContinuousClock.Instant) -> [Action] {
        rateLimit.setBudget(perSecond)
        guard let cap = applyCap(now: now) else { return [] }
        var actions: [Action] = [.report(.rateLimit(cap))]
        if !paced.isEmpty, case .open = phase { actions.append(armTimer(after: .zero)) }
        return actions
    }

    /// Stop: every parked and paced send is answered without being transmitted. The gate keeps its phase and pace.
    mutating func stop() -> [Action] {
        let sends = paced + parked
        paced.removeAll()
        parked.removeAll()
        return sends.isEmpty ? [] : [.drop(sends)]
    }

    // MARK: Steps

    private mutating func submit(_ send: Send, now: ContinuousClock.Instant, into actions: inout [Action]) {
        climb(now: now, into: &actions)
        switch phase {
        case .open:
            // Behind sends already waiting for a token, in order.
            if !paced.isEmpty {
                paced.append(send)
                actions.append(.report(.rateWait))
            } else if let wait = take(now: now) {
                paced.append(send)
                actions += [.report(.rateWait), armTimer(after: wait)]
            } else {
                actions.append(.start(send, ticket: started(now: now)))
            }
        case .probing(inFlight: false):
            _ = take(now: now)
            phase = .probing(inFlight: true)
            probeTicket = started(now: now)
            actions += [.report(.probe), .start(send, ticket: probeTicket)]
        case .paused, .probing(inFlight: true):
            parked.append(send)
        }
    }

    private func pauseLength(retryAfter: Duration?, minimum: Duration?, jitter: Double) -> Duration {
        if let retryAfter { return min(max(retryAfter, .milliseconds(100)), .seconds(300)) }
        // 1 s, 2 s, 4 s … up to `maxBackoff`, jittered; never shorter than the fault asks.
        return max(Backoff(base: .seconds(1), cap: maxBackoff).delay(afterAttempt: pauses, jitter: jitter), minimum ?? .zero)
    }

    /// Arms a new pace timer (replacing any).
    private mutating func armTimer(after wait: Duration) -> Action {
        timers &+= 1
        timer = timers
        return .schedule(.pace(timers), after: max(wait, Self.timerQuantum))
    }

    /// Brings the bucket to `rateLimit.cap`; returns the new cap (0: none) when it changed.
    private mutating func applyCap(now: ContinuousClock.Instant) -> Double? {
        let cap = rateLimit.cap
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

    /// The adaptive cap's climb for the seconds since its last step.
    private mutating func climb(now: ContinuousClock.Instant, into actions: inout [Action]) {
        if rateLimit.climb(now: now), let cap = applyCap(now: now) { actions.append(.report(.rateLimit(cap))) }
    }

    /// Takes a token for a send that may leave now: nil when it may, else the wait (the send must wait in line).
    private mutating func take(now: ContinuousClock.Instant) -> Duration? {
        guard bucket != nil else { return nil }
        return bucket!.take(now: now)
    }

    /// The rate that met the quota: what FCM accepted over the meter's window when it accepted anything (a burst
    /// that hit the quota was sent far faster than the quota lets through: decreasing from the burst's rate left the
    /// cap above the quota and met it again), else the rate sent.
    private func rateAtQuota(now: ContinuousClock.Instant) -> Double {
        let sent = meter.rate(now: now)
        let passed = accepted.rate(now: now)
        return passed > 0 ? min(sent, passed) : sent
    }

    /// A send leaves: its ticket.
    private mutating func started(now: ContinuousClock.Instant) -> UInt64 {
        meter.record(now: now)
        nextTicket &+= 1
        return nextTicket
    }
}

extension SendGateStateMachine: Sendable where Send: Sendable {}
extension SendGateStateMachine.Action: Sendable where Send: Sendable {}
extension SendGateStateMachine.Action: Equatable where Send: Equatable {}
