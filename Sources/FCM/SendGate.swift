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
/// capped, jittered backoff; then one probe goes out, and its success releases everything held. Sends
/// held meanwhile are not attempts: they have not left.
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
    }

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

    /// `onResume` hears that a probe succeeded and sending resumed, before the held sends go out.
    init(threshold: Int, maxBackoff: Duration = .seconds(10), logger: Logger, metrics: MetricsRegistry,
         onHealth: @escaping @Sendable (FCMHealth) -> Void, onResume: @escaping @Sendable () -> Void = {}) {
        self.threshold = max(1, threshold)
        self.maxBackoff = maxBackoff
        self.logger = logger
        self.onHealth = onHealth
        self.onResume = onResume
        paused = metrics.gauge("fcm_send_paused", help: "1 while sending to FCM is paused for a project-wide fault.")
        probes = metrics.counter("fcm_probes_total", help: "Single requests sent to learn whether FCM recovered from a pause.")
        var faults: [FCMFault: Counter] = [:]
        for fault in FCMFault.allCases {
            faults[fault] = metrics.counter("fcm_faults_total", help: "FCM answers that were faults of the project, overload or the connection, by kind.",
                                            labels: ["kind": fault.rawValue])
        }
        self.faults = faults
    }

    /// Runs `held.run` now, or holds it until the pause ends.
    func submit(_ held: Held) {
        let start = state.withLock { state -> (ticket: UInt64, probe: Bool)? in
            state.nextTicket &+= 1
            switch state.phase {
            case .open:
                return (state.nextTicket, false)
            case .probing(inFlight: false):
                state.phase = .probing(inFlight: true)
                state.probeTicket = state.nextTicket
                return (state.nextTicket, true)
            case .paused, .probing(inFlight: true):
                state.held.append(held)
                return nil
            }
        }
        guard let start else { return }
        if start.probe { probes.increment() }
        held.run(start.ticket)
    }

    /// An answer that shows FCM works for the project (success, or a device-level answer).
    func healthy(ticket: UInt64) {
        let (released, recovered) = state.withLock { state -> ([Held], (fault: FCMFault, reason: String, since: ContinuousClock.Instant)?) in
            state.consecutiveFaults = 0
            guard case .probing(inFlight: true) = state.phase, ticket == state.probeTicket else { return ([], nil) }
            state.phase = .open
            state.pauses = 0
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

    /// A fault answer. Returns how long sending pauses (nil when it does not).
    @discardableResult
    func fault(_ kind: FCMFault, reason: String, retryAfter: Duration?, ticket: UInt64) -> Duration? {
        faults[kind]?.increment()
        let (delay, newEpisode) = state.withLock { state -> (Duration?, Bool) in
            state.consecutiveFaults += 1
            switch state.phase {
            case .open:
                guard kind == .project || state.consecutiveFaults >= threshold else { return (nil, false) }
            case .probing(inFlight: true) where ticket == state.probeTicket:
                break
            case .paused, .probing:
                // An answer to a send that left before the pause: the pause already accounts for it.
                return (nil, false)
            }
            state.pauses += 1
            state.phase = .paused
            let newEpisode = state.episode == nil
            if newEpisode { state.episode = (kind, reason, .now) }
            return (pauseLength(retryAfter: retryAfter, pauses: state.pauses), newEpisode)
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

    private func pauseLength(retryAfter: Duration?, pauses: Int) -> Duration {
        if let retryAfter { return min(max(retryAfter, .milliseconds(100)), .seconds(300)) }
        // 1 s, 2 s, 4 s … up to `maxBackoff`, jittered.
        return Backoff(base: .seconds(1), cap: maxBackoff).delay(afterAttempt: pauses)
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
            defer { state.held.removeAll() }
            return state.held
        }
        for item in held { item.drop() }
    }
}
