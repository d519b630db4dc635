@testable import FCM
import Logging
import Metrics
import Synchronization
import TestSupport
import Testing

/// The send gate's decisions without a clock, a timer or a network (SPEC §3 "Project-wide faults pause the sender",
/// "FCM's project quota"): each case is a sequence of inputs at instants chosen by the test, the actions each one
/// returns, and the gate's phase, parked sends and paced line at the end. Sends are numbers; jitter is 1 (no jitter).
@Suite("Send gate state machine")
struct SendGateStateMachineTests {
    typealias Machine = SendGateStateMachine<Int>

    static let start = ContinuousClock.now

    static func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    /// One input, at `at` milliseconds.
    enum Input: Sendable {
        case submit(Int, at: Int = 0)
        case healthy(ticket: UInt64, at: Int = 0)
        case fault(FCMFault, _ reason: String = "UNAVAILABLE", ticket: UInt64, retryAfter: Duration? = nil, minimum: Duration? = nil,
                   quota: Bool = false, at: Int = 0)
        case pauseEnded(at: Int)
        case abandoned(ticket: UInt64, at: Int = 0)
        case paceTimer(UInt64, at: Int)
        case budget(Double?, at: Int = 0)
        case stop
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var threshold = 3
        var budget: Double?
        /// Each input and the actions it returns, rendered by `render`.
        var steps: [(Input, [String])]
        var phase: Machine.Phase
        var parked: [Int] = []
        var paced: [Int] = []
        var testDescription: String { name }
    }

    static func apply(_ input: Input, to machine: inout Machine) -> [Machine.Action] {
        switch input {
        case .submit(let send, let ms): machine.submit(send, now: at(ms))
        case .healthy(let ticket, let ms): machine.answeredHealthy(ticket: ticket, now: at(ms))
        case .fault(let kind, let reason, let ticket, let retryAfter, let minimum, let quota, let ms):
            machine.fault(kind, reason: reason, retryAfter: retryAfter, minimumPause: minimum, quota: quota, ticket: ticket,
                          jitter: 1, now: at(ms))
        case .pauseEnded(let ms): machine.pauseEnded(now: at(ms))
        case .abandoned(let ticket, let ms): machine.abandoned(ticket: ticket, now: at(ms))
        case .paceTimer(let number, let ms): machine.paceTimerFired(number, now: at(ms))
        case .budget(let perSecond, let ms): machine.budgetChanged(perSecond: perSecond, now: at(ms))
        case .stop: machine.stop()
        }
    }

    static func ms(_ duration: Duration) -> String { "\(Int((duration / .milliseconds(1)).rounded()))ms" }

    /// A cap to two decimals.
    static func rate(_ value: Double) -> String { "\((value * 100).rounded() / 100)" }

    static func render(_ action: Machine.Action) -> String {
        switch action {
        case .start(let send, let ticket): "start \(send)#\(ticket)"
        case .schedule(.pauseEnd, let after): "pauseEnd in \(ms(after))"
        case .schedule(.pace(let number), let after): "pace#\(number) in \(ms(after))"
        case .drop(let sends): "drop \(sends)"
        case .report(.health(.ok)): "health ok"
        case .report(.health(.paused(let kind, let reason))): "health paused \(kind) \(reason)"
        case .report(.paused(let cause)): "paused \(cause == nil ? 0 : 1)"
        case .report(.rateLimit(let cap)): "cap \(rate(cap))"
        case .report(.fault(let kind)): "fault \(kind)"
        case .report(.quotaAnswer): "quota 429"
        case .report(.probe): "probe"
        case .report(.rateWait): "wait"
        case .report(.log(.quotaExceeded(let cap))): "log quota cap \(rate(cap))"
        case .report(.log(.paused(let kind, let reason, let pause))): "log paused \(kind) \(reason) \(ms(pause))"
        case .report(.log(.resumed(let kind, let pausedFor, let released))): "log resumed \(kind) after \(ms(pausedFor)) released \(released)"
        }
    }

    static let pauseOverload = ["fault overload", "paused 1", "health paused overload UNAVAILABLE", "log paused overload UNAVAILABLE 1000ms",
                                "pauseEnd in 1000ms"]

    static let cases: [Case] = [
        Case(name: "overload faults below the threshold pause nothing; a healthy answer starts the count again", steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["start 2#2"]), (.submit(3), ["start 3#3"]), (.submit(4), ["start 4#4"]),
            (.fault(.overload, ticket: 1), ["fault overload"]),
            (.fault(.connection, "TRANSPORT_TIMEOUT", ticket: 2), ["fault connection"]),
            (.healthy(ticket: 3), []),
            (.fault(.overload, ticket: 4), ["fault overload"]),
            (.submit(5), ["start 5#5"]),
        ], phase: .open),
        Case(name: "the threshold's overload fault pauses; sends are parked, not started", steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["start 2#2"]), (.submit(3), ["start 3#3"]),
            (.fault(.overload, ticket: 1), ["fault overload"]),
            (.fault(.overload, ticket: 2), ["fault overload"]),
            (.fault(.overload, ticket: 3), pauseOverload),
            (.submit(4), []), (.submit(5), []),
        ], phase: .paused, parked: [4, 5]),
        Case(name: "a project fault pauses at once", steps: [
            (.submit(1), ["start 1#1"]),
            (.fault(.project, "PERMISSION_DENIED", ticket: 1),
             ["fault project", "paused 1", "health paused project PERMISSION_DENIED", "log paused project PERMISSION_DENIED 1000ms",
              "pauseEnd in 1000ms"]),
        ], phase: .paused),
        Case(name: "Retry-After sets the pause, not the backoff (and not the minimum)", steps: [
            (.submit(1), ["start 1#1"]),
            (.fault(.project, "UNAVAILABLE", ticket: 1, retryAfter: .seconds(30), minimum: .seconds(60)),
             ["fault project", "paused 1", "health paused project UNAVAILABLE", "log paused project UNAVAILABLE 30000ms", "pauseEnd in 30000ms"]),
        ], phase: .paused),
        Case(name: "answers to sends that left before the pause change nothing", steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["start 2#2"]), (.submit(3), ["start 3#3"]),
            (.fault(.project, "PERMISSION_DENIED", ticket: 1),
             ["fault project", "paused 1", "health paused project PERMISSION_DENIED", "log paused project PERMISSION_DENIED 1000ms",
              "pauseEnd in 1000ms"]),
            (.fault(.overload, ticket: 2), ["fault overload"]),
            (.healthy(ticket: 3), []),
            (.submit(4), []),
        ], phase: .paused, parked: [4]),
        Case(name: "pause end → probe → the probe's healthy answer resumes and releases the parked sends in order", steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["start 2#2"]),
            (.fault(.project, "PERMISSION_DENIED", ticket: 1),
             ["fault project", "paused 1", "health paused project PERMISSION_DENIED", "log paused project PERMISSION_DENIED 1000ms",
              "pauseEnd in 1000ms"]),
            (.submit(3, at: 100), []), (.submit(4, at: 200), []), (.submit(5, at: 300), []),
            (.pauseEnded(at: 1000), ["probe", "start 3#3"]),
            // Waits for the probe's answer; a late answer of a send from before the pause is not the probe's.
            (.submit(6, at: 1100), []),
            (.fault(.overload, ticket: 2, at: 1200), ["fault overload"]),
            (.healthy(ticket: 2, at: 1300), []),
            (.healthy(ticket: 3, at: 1500),
             ["paused 0", "health ok", "log resumed project after 1500ms released 3", "start 4#4", "start 5#5", "start 6#6"]),
            (.submit(7, at: 1600), ["start 7#7"]),
        ], phase: .open),
        Case(name: "a probe that ends without an answer (cancelled) is replaced by the next parked send; other sends' ends change nothing", steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["start 2#2"]),
            (.fault(.project, "PERMISSION_DENIED", ticket: 1),
             ["fault project", "paused 1", "health paused project PERMISSION_DENIED", "log paused project PERMISSION_DENIED 1000ms",
              "pauseEnd in 1000ms"]),
            (.submit(3, at: 100), []), (.submit(4, at: 200), []),
            (.pauseEnded(at: 1000), ["probe", "start 3#3"]),
            (.abandoned(ticket: 2, at: 1100), []),
            (.abandoned(ticket: 3, at: 1200), ["probe", "start 4#4"]),
            (.healthy(ticket: 4, at: 1300), ["paused 0", "health ok", "log resumed project after 1300ms released 0"]),
        ], phase: .open),
        Case(name: "a pause end with nothing parked: the next send is the probe", steps: [
            (.submit(1), ["start 1#1"]),
            (.fault(.project, "PERMISSION_DENIED", ticket: 1),
             ["fault project", "paused 1", "health paused project PERMISSION_DENIED", "log paused project PERMISSION_DENIED 1000ms",
              "pauseEnd in 1000ms"]),
            (.pauseEnded(at: 1000), []),
            (.submit(2, at: 1200), ["probe", "start 2#2"]),
            (.submit(3, at: 1300), []),
        ], phase: .probing(inFlight: true), parked: [3]),
        Case(name: "the probe's fault pauses again, longer, in the same episode (no second health report)", threshold: 1, steps: [
            (.submit(1), ["start 1#1"]),
            (.fault(.overload, ticket: 1), pauseOverload),
            (.submit(2, at: 500), []),
            (.pauseEnded(at: 1000), ["probe", "start 2#2"]),
            (.fault(.overload, ticket: 2, at: 1100), ["fault overload", "paused 1", "pauseEnd in 2000ms"]),
            // The failed probe is the sender's to retry, not parked: the next send is the probe.
            (.pauseEnded(at: 3100), []),
            (.submit(3, at: 3150), ["probe", "start 3#3"]),
            (.fault(.connection, "TRANSPORT_CONNECT", ticket: 3, at: 3200), ["fault connection", "paused 1", "pauseEnd in 4000ms"]),
            (.pauseEnded(at: 7200), []),
            (.submit(4, at: 7250), ["probe", "start 4#4"]),
            (.healthy(ticket: 4, at: 7300), ["paused 0", "health ok", "log resumed overload after 7300ms released 0"]),
            // Healthy since: the next pause starts a new episode at the shortest backoff.
            (.submit(5, at: 7400), ["start 5#5"]),
            (.fault(.overload, ticket: 5, at: 7500), pauseOverload),
        ], phase: .paused),
        Case(name: "the project's quota 429 lowers the cap below the measured rate and pauses at least 60 s", steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["start 2#2"]), (.submit(3), ["start 3#3"]),
            (.fault(.overload, "QUOTA_EXCEEDED", ticket: 1, minimum: .seconds(60), quota: true), ["fault overload", "quota 429"]),
            (.fault(.overload, "QUOTA_EXCEEDED", ticket: 2, minimum: .seconds(60), quota: true), ["fault overload", "quota 429"]),
            // 3 sends in one 100 ms slot: 30/s; the cap is 70% of that.
            (.fault(.overload, "QUOTA_EXCEEDED", ticket: 3, minimum: .seconds(60), quota: true),
             ["fault overload", "quota 429", "cap 21.0", "log quota cap 21.0", "paused 1", "health paused overload QUOTA_EXCEEDED",
              "log paused overload QUOTA_EXCEEDED 60000ms", "pauseEnd in 60000ms"]),
            // A quota 429 to a send from before the pause is counted and changes nothing more.
            (.fault(.overload, "QUOTA_EXCEEDED", ticket: 3, minimum: .seconds(60), quota: true), ["fault overload", "quota 429"]),
            (.pauseEnded(at: 60000), []),
            (.submit(4, at: 60000), ["probe", "start 4#4"]),
            (.healthy(ticket: 4, at: 60000), ["paused 0", "health ok", "log resumed overload after 60000ms released 0"]),
            // The probe took the bucket's one token: the next send waits 1/21 s in line.
            (.submit(5, at: 60000), ["wait", "pace#1 in 48ms"]),
            // Each second without a 429 climbs 30·0.25/300 per second (to 95% of 30/s after 300 s).
            (.paceTimer(1, at: 61000), ["cap 21.03", "start 5#5"]),
        ], phase: .open),
        Case(name: "at a quota 429 after accepted answers, the cap is 70% of the rate FCM accepted, not of a faster burst", steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["start 2#2"]), (.submit(3), ["start 3#3"]), (.submit(4), ["start 4#4"]),
            (.healthy(ticket: 1), []),
            (.fault(.overload, "QUOTA_EXCEEDED", ticket: 2, minimum: .seconds(60), quota: true), ["fault overload", "quota 429"]),
            (.fault(.overload, "QUOTA_EXCEEDED", ticket: 3, minimum: .seconds(60), quota: true), ["fault overload", "quota 429"]),
            // 4 sends in one 100 ms slot (40/s), one of them accepted (10/s): the cap is 70% of 10/s.
            (.fault(.overload, "QUOTA_EXCEEDED", ticket: 4, minimum: .seconds(60), quota: true),
             ["fault overload", "quota 429", "cap 7.0", "log quota cap 7.0", "paused 1", "health paused overload QUOTA_EXCEEDED",
              "log paused overload QUOTA_EXCEEDED 60000ms", "pauseEnd in 60000ms"]),
        ], phase: .paused),
        Case(name: "a 5xx pause leaves the cap alone", threshold: 1, steps: [
            (.submit(1), ["start 1#1"]),
            (.fault(.overload, ticket: 1), pauseOverload),
        ], phase: .paused),
        Case(name: "a send without a token waits in line; the pace timer lets the line out in order", budget: 20, steps: [
            (.submit(1, at: 0), ["start 1#1"]),
            (.submit(2, at: 0), ["wait", "pace#1 in 50ms"]),
            (.submit(3, at: 10), ["wait"]),
            (.submit(4, at: 20), ["wait"]),
            // The timer for the rest of the line is armed before the released send starts; an old timer does nothing.
            (.paceTimer(1, at: 55), ["pace#2 in 50ms", "start 2#2"]),
            (.paceTimer(1, at: 60), []),
            // Never more than the burst (1) kept, however late the timer fires.
            (.paceTimer(2, at: 150), ["pace#3 in 50ms", "start 3#3"]),
            (.paceTimer(3, at: 210), ["start 4#4"]),
        ], phase: .open),
        Case(name: "a budget change: the line moves at the new pace at once; an unchanged budget does nothing", budget: 0.1, steps: [
            (.submit(1), ["start 1#1"]),
            (.submit(2), ["wait", "pace#1 in 10000ms"]),
            (.submit(3), ["wait"]),
            (.budget(nil, at: 100), ["cap 0.0", "pace#2 in 5ms"]),
            (.paceTimer(2, at: 105), ["start 2#2", "start 3#3"]),
            (.paceTimer(1, at: 10000), []),
            (.budget(0.1, at: 10100), ["cap 0.1"]),
            (.budget(0.1, at: 10100), []),
            (.submit(4, at: 10100), ["start 4#4"]),
            (.submit(5, at: 10100), ["wait", "pace#3 in 10000ms"]),
            (.budget(50, at: 10200), ["cap 50.0", "pace#4 in 5ms"]),
        ], phase: .open, paced: [5]),
        Case(name: "a pause moves the line to the parked sends; after the probe they go out in order, paced", threshold: 1, budget: 20, steps: [
            (.submit(1), ["start 1#1"]),
            (.submit(2), ["wait", "pace#1 in 50ms"]),
            (.submit(3), ["wait"]),
            (.fault(.overload, ticket: 1, at: 10), pauseOverload),
            (.submit(4, at: 20), []),
            (.paceTimer(1, at: 50), []),
            (.pauseEnded(at: 1010), ["probe", "start 2#2"]),
            (.healthy(ticket: 2, at: 1020),
             ["paused 0", "health ok", "log resumed overload after 1010ms released 2", "wait", "pace#2 in 40ms", "wait"]),
            (.paceTimer(2, at: 1075), ["pace#3 in 50ms", "start 3#3"]),
        ], phase: .open, paced: [4]),
        Case(name: "stop drops the paced line", budget: 0.1, steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["wait", "pace#1 in 10000ms"]), (.submit(3), ["wait"]),
            (.stop, ["drop [2, 3]"]),
            (.stop, []),
            (.paceTimer(1, at: 10000), []),
        ], phase: .open),
        Case(name: "stop drops the parked sends; the gate keeps its pause", budget: 20, steps: [
            (.submit(1), ["start 1#1"]), (.submit(2), ["wait", "pace#1 in 50ms"]),
            (.fault(.project, "PERMISSION_DENIED", ticket: 1),
             ["fault project", "paused 1", "health paused project PERMISSION_DENIED", "log paused project PERMISSION_DENIED 1000ms",
              "pauseEnd in 1000ms"]),
            (.submit(3), []),
            (.stop, ["drop [2, 3]"]),
            (.pauseEnded(at: 1000), []),
        ], phase: .probing(inFlight: false)),
    ]

    @Test(arguments: cases)
    func sequence(_ test: Case) {
        var machine = Machine(threshold: test.threshold, budget: test.budget, now: Self.at(0))
        for (index, (input, expected)) in test.steps.enumerated() {
            let actions = Self.apply(input, to: &machine).map(Self.render)
            #expect(actions == expected, "step \(index): \(input)")
        }
        #expect(machine.phase == test.phase)
        #expect(machine.parked == test.parked)
        #expect(machine.paced == test.paced)
    }

    /// (Retry-After, minimum pause, pauses in a row with jitter 1, the pause lengths in ms).
    @Test(arguments: [
        (nil, nil, 6, [1000, 2000, 4000, 8000, 10000, 10000]),
        (nil, Duration.seconds(60), 2, [60000, 60000]),
        (nil, Duration.seconds(3), 3, [3000, 3000, 4000]),
        // Retry-After is kept within 100 ms…300 s and wins over the minimum.
        (Duration.milliseconds(20), Duration.seconds(60), 1, [100]),
        (Duration.seconds(1000), nil, 1, [300_000]),
        (Duration.seconds(7), nil, 2, [7000, 7000]),
    ] as [(Duration?, Duration?, Int, [Int])])
    func pauseLengths(retryAfter: Duration?, minimum: Duration?, pauses: Int, expected: [Int]) {
        var machine = Machine(threshold: 1, now: Self.at(0))
        var lengths: [Int] = []
        var ticket = Self.ticket(machine.submit(1, now: Self.at(0)))
        for index in 0..<pauses {
            let actions = machine.fault(.overload, reason: "UNAVAILABLE", retryAfter: retryAfter, minimumPause: minimum, ticket: ticket,
                                        jitter: 1, now: Self.at(index))
            for case .schedule(.pauseEnd, let after) in actions { lengths.append(Int((after / .milliseconds(1)).rounded())) }
            #expect(machine.pauseEnded(now: Self.at(index)).isEmpty)
            ticket = Self.ticket(machine.submit(1, now: Self.at(index)))
        }
        #expect(lengths == expected)
    }

    /// The jitter scales the backoff (never a minimum or Retry-After).
    @Test func jitter_scalesTheBackoff() {
        var machine = Machine(threshold: 1, maxBackoff: .seconds(30), now: Self.at(0))
        _ = machine.submit(1, now: Self.at(0))
        let actions = machine.fault(.overload, reason: "UNAVAILABLE", retryAfter: nil, ticket: 1, jitter: 0.5, now: Self.at(0))
        #expect(actions.last.map(Self.render) == "pauseEnd in 500ms")
    }

    static func ticket(_ actions: [Machine.Action]) -> UInt64 {
        for case .start(_, let ticket) in actions { return ticket }
        Issue.record("no send started: \(actions.map(render))")
        return 0
    }

    /// The owner carries the actions out: the probe's healthy answer tells `/readyz` before the parked
    /// sends run, in order, each with its own ticket.
    @Test func gate_carriesOutTheActions_inOrder() async throws {
        let events = Recorder<String>()
        let metrics = MetricsRegistry()
        let gate = SendGate(threshold: 1, logger: Logger(label: "fcm", sink: MemorySink()), metrics: metrics,
                            onHealth: { health in events.record("health \(health == .ok ? "ok" : "paused")") })
        func parked(_ name: String) -> SendGate.Send {
            SendGate.Send(run: { ticket in events.record("run \(name)#\(ticket)") },
                          drop: { events.record("drop \(name)") })
        }
        gate.offer(parked("a"))
        let pause = gate.fault(.overload, reason: "UNAVAILABLE", retryAfter: .milliseconds(100), ticket: 1)
        #expect(pause == .milliseconds(100))
        #expect(metrics.value("fcm_send_paused", labels: ["cause": "overload"]) == 1)
        gate.offer(parked("b"))
        gate.offer(parked("c"))
        #expect(try await eventually("the probe b runs once the pause ends") { events.all.contains("run b#2") })
        #expect(metrics.value("fcm_probes_total") == 1)
        gate.healthy(ticket: 2)
        gate.offer(parked("d"))
        gate.dropParked()
        #expect(events.all == ["run a#1", "health paused", "run b#2", "health ok", "run c#3", "run d#4"])
        #expect(metrics.value("fcm_send_paused", labels: ["cause": "overload"]) == 0)
        #expect(metrics.value("fcm_faults_total", labels: ["kind": "overload"]) == 1)
    }
}
