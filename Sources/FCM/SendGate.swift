import Dispatch
import FoundationEssentials
import Logging
import Metrics
import Push
import Synchronization
import TextSupport
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

/// The send gate's owner: one lock around `SendGateStateMachine` (pauses for project-wide faults, the probe, pacing;
/// see there), and the one place its actions are carried out, after the lock is released: sends start, timers are
/// armed on `DispatchQueue`, `onHealth` is told, lines logged, metrics set. Nothing is decided here.
final class SendGate: Sendable {
    /// A send handed to the gate, to leave now, when the pace allows or after a pause: `run` transmits it (with the
    /// ticket its answer must quote), `drop` answers it without sending (stop).
    struct Send: Sendable {
        var run: @Sendable (_ ticket: UInt64) -> Void
        var drop: @Sendable () -> Void
    }

    typealias Machine = SendGateStateMachine<Send>

    private let machine: Mutex<Machine>
    private let logger: Logger
    private let onHealth: @Sendable (FCMHealth) -> Void
    /// `fcm_send_paused{cause}`, one series per cause (a fault kind, or the disabling answer a known-good token got).
    private let paused: [String: Gauge]
    private let probes: Counter
    private let faults: [FCMFault: Counter]
    private let rateLimit: Gauge
    private let quotaExceeded: Counter
    private let rateWaits: Counter
    /// Pauses begun so far: a send that saw this change while it waited was parked through a pause.
    private let pauses = Atomic<Int>(0)

    /// `threshold`: consecutive overload/connection faults that open a pause. `budget` is this instance's share of the
    /// project's sends per second (nil: no cap until a quota 429).
    init(threshold: Int, maxBackoff: Duration = .seconds(10), budget: Double? = nil, logger: Logger, metrics: MetricsRegistry,
         onHealth: @escaping @Sendable (FCMHealth) -> Void) {
        self.logger = logger
        self.onHealth = onHealth
        var paused: [String: Gauge] = [:]
        for cause in SendGate.pauseCauses {
            paused[cause] = metrics.gauge("fcm_send_paused",
                                          help: "1 while sending to FCM is paused for a project-wide fault, by cause: project, overload, connection, or the disabling answer a token that received pushes got (SENDER_ID_MISMATCH: a key of another project; NOT_FOUND, UNREGISTERED, INVALID_ARGUMENT: the project, the URL or a proxy).",
                                          labels: ["cause": cause])
        }
        self.paused = paused
        probes = metrics.counter("fcm_probes_total", help: "Single requests sent to learn whether FCM recovered from a pause.")
        rateLimit = metrics.gauge("fcm_send_rate_limit",
                                  help: "The sends per second this instance allows itself (its share of FCM_MAX_SENDS_PER_SECOND, lower after FCM's project quota was hit); 0: no cap, or, with a budget, none of it free for this instance yet.")
        quotaExceeded = metrics.counter("fcm_quota_exceeded_total", help: "FCM answers of 429 QUOTA_EXCEEDED for the project's quota (not one device's).")
        rateWaits = metrics.counter("fcm_send_rate_waits_total", help: "Sends that waited for the send-rate cap before leaving.")
        var faults: [FCMFault: Counter] = [:]
        for fault in FCMFault.allCases {
            faults[fault] = metrics.counter("fcm_faults_total", help: "FCM answers that were faults of the project, overload or the connection, by kind.",
                                            labels: ["kind": fault.rawValue])
        }
        self.faults = faults
        let machine = Machine(threshold: threshold, maxBackoff: maxBackoff, budget: budget, now: .now)
        rateLimit.set(machine.rateLimit.cap ?? 0)
        self.machine = Mutex(machine)
    }

    /// Returns the send's ticket when it may leave now: the caller transmits it at once, with no call back. Otherwise
    /// the gate keeps it and runs `send.run` when a token comes or the pause ends (or `send.drop` at a stop).
    func submit(_ send: Send) -> UInt64? {
        let now = ContinuousClock.now
        var actions = machine.withLock { $0.submit(send, now: now) }
        var ticket: UInt64?
        actions.removeAll { action in
            guard case .start(_, let started) = action else { return false }
            ticket = started
            return true
        }
        execute(actions)
        return ticket
    }

    /// This instance's share of the project's sends per second (nil: none), from the live-instances heartbeat. Sends
    /// waiting in line move at the new pace at once.
    func setBudget(_ perSecond: Double?) {
        execute(machine.withLock { $0.budgetChanged(perSecond: perSecond, now: .now) })
    }

    /// The sends per second allowed now (nil: no cap), and the pacing state behind it.
    var rateLimitState: SendRateLimit { machine.withLock { $0.rateLimit } }

    /// An answer that shows FCM works for the project (success, or a device-level answer).
    func healthy(ticket: UInt64) {
        execute(machine.withLock { $0.answeredHealthy(ticket: ticket, now: .now) })
    }

    /// A fault answer. Returns how long sending pauses (nil when it does not). Without `retryAfter` the pause lasts at
    /// least `minimumPause`. `quota`: the project's QUOTA_EXCEEDED; when it opens a pause from open sending, the
    /// send-rate cap drops below the rate that hit the quota.
    @discardableResult
    func fault(_ kind: FCMFault, reason: String, retryAfter: Duration?, minimumPause: Duration? = nil, quota: Bool = false,
               cause: String? = nil, ticket: UInt64) -> Duration? {
        let now = ContinuousClock.now
        let jitter = Double.random(in: 0.5...1.0)
        let actions = machine.withLock {
            $0.fault(kind, reason: reason, retryAfter: retryAfter, minimumPause: minimumPause, quota: quota, cause: cause, ticket: ticket,
                     jitter: jitter, now: now)
        }
        execute(actions)
        for case .schedule(.pauseEnd, let delay) in actions { return delay }
        return nil
    }

    /// Every `cause` of `fcm_send_paused`.
    static let pauseCauses = FCMFault.allCases.map(\.rawValue) + DisablingAnswer.allCases.map(\.rawValue)

    /// Pauses begun so far (compare two readings to learn whether a pause came between them).
    var pausesBegun: Int { pauses.load(ordering: .relaxed) }

    /// The send with `ticket` ended without an answer (cancelled, the client shut down): a probe is replaced.
    func abandoned(ticket: UInt64) {
        execute(machine.withLock { $0.abandoned(ticket: ticket, now: .now) })
    }

    /// Answers every parked send without transmitting it (stop).
    func dropParked() {
        execute(machine.withLock { $0.stop() })
    }

    /// Carries out the machine's actions, in order (never under the lock: a send may answer at once).
    private func execute(_ actions: [Machine.Action]) {
        for action in actions {
            switch action {
            case .start(let send, let ticket):
                send.run(ticket)
            case .schedule(let timer, let delay):
                DispatchQueue.global().asyncAfter(deadline: .now() + delay.asSeconds) { [self] in
                    execute(machine.withLock { machine in
                        switch timer {
                        case .pauseEnd: machine.pauseEnded(now: .now)
                        case .pace(let number): machine.paceTimerFired(number, now: .now)
                        }
                    })
                }
            case .drop(let sends):
                for send in sends { send.drop() }
            case .report(let report):
                self.report(report)
            }
        }
    }

    private func report(_ report: Machine.Report) {
        switch report {
        case .health(let health): onHealth(health)
        case .paused(let cause):
            for (name, gauge) in paused { gauge.set(name == cause ? 1 : 0) }
            if cause != nil { pauses.add(1, ordering: .relaxed) }
        case .rateLimit(let cap): rateLimit.set(cap)
        case .fault(let kind): faults[kind]?.increment()
        case .quotaAnswer: quotaExceeded.increment()
        case .probe: probes.increment()
        case .rateWait: rateWaits.increment()
        case .log(let line): log(line)
        }
    }

    private func log(_ line: Machine.Log) {
        switch line {
        case .quotaExceeded(let cap):
            logger.warning("FCM's project quota exceeded; sending resumes below the rate that hit it", metadata: [
                "fcm.send_rate_limit": "\(Int(cap.rounded()))/s",
            ])
        case .paused(let kind, let reason, let pause):
            let metadata: LogMetadata = ["fcm.fault": kind.rawValue, "fcm.error": reason, "fcm.pause": pause.logSeconds]
            if kind == .project {
                logger.error("FCM refuses the project; sending paused, no device disabled while it lasts; operator action needed", metadata: metadata)
            } else {
                logger.warning("FCM is failing for every send; sending paused", metadata: metadata)
            }
        case .resumed(let kind, let pausedFor, let released):
            logger.notice("FCM answers again; sending resumed", metadata: [
                "fcm.fault": kind.rawValue, "fcm.paused_for": pausedFor.logSeconds, "fcm.released": "\(released)",
            ])
        }
    }
}

extension Duration {
    /// A pause as a log value: seconds with a unit, to the millisecond (`12.041s`, not Duration's nine decimals).
    package var logSeconds: String { asSeconds.fixed(3) + "s" }
}
