@testable import FCM
import FCMEmulator
import Foundation
import Logging
import Metrics
import Push
import Synchronization
import TestSupport
import Testing

/// The sender's pace (SPEC §3 "FCM's project quota"): the gate's line of sends waiting for a token, and the sender
/// against an emulator that enforces a project quota. Assertions count sends and answers, never time.
@Suite("FCM send rate", .blockingFixtures)
struct SendRateTests {
    static func gate(budget: Double? = nil, metrics: MetricsRegistry = MetricsRegistry()) -> SendGate {
        SendGate(threshold: 3, budget: budget, logger: Logger(label: "fcm", sink: MemorySink()), metrics: metrics, onHealth: { _ in })
    }

    /// The tickets of the sends that ran, and how many were dropped.
    final class Record: Sendable {
        let ran = Recorder<UInt64>()
        let dropped = Mutex(0)
        var runs: Int { ran.count }
        var drops: Int { dropped.withLock { $0 } }

        /// A parked send that records its ticket when it runs.
        func parked() -> SendGate.Send {
            SendGate.Send(run: { [self] ticket in ran.record(ticket) }, drop: { [self] in dropped.withLock { $0 += 1 } })
        }
    }

    /// Under a cap, sends beyond the burst wait in line and a timer lets them out in order; none is lost or run twice.
    @Test func gate_pacesSendsBeyondTheBurst_andReleasesThemInOrder() async throws {
        let metrics = MetricsRegistry()
        let gate = Self.gate(budget: 20, metrics: metrics)  // burst 1
        let record = Record()
        for _ in 0..<6 { gate.offer(record.parked()) }
        #expect(record.runs == 1)
        #expect(metrics.value("fcm_send_rate_waits_total") == 5)
        #expect(metrics.value("fcm_send_rate_limit") == 20)
        try await eventually("all six sends ran") { record.runs == 6 }
        #expect(record.ran.all == [1, 2, 3, 4, 5, 6])
    }

    /// Lifting the cap lets the line out at once; a stop drops the line without sending it.
    @Test func gate_budgetChanges_andStopDropsTheLine() async throws {
        let metrics = MetricsRegistry()
        let gate = Self.gate(budget: 0.1, metrics: metrics)  // one send per 10 s, burst 1
        let record = Record()
        for _ in 0..<3 { gate.offer(record.parked()) }
        #expect(record.runs == 1)
        gate.setBudget(nil)
        #expect(metrics.value("fcm_send_rate_limit") == 0)
        try await eventually("three sends ran") { record.runs == 3 }
        gate.setBudget(0.1)
        for _ in 0..<3 { gate.offer(record.parked()) }
        #expect(record.runs == 4)
        gate.dropParked()
        #expect(record.drops == 2)
        #expect(record.runs == 4)
    }

    /// A budget share of 0 (an instance whose share others still hold) holds every send, none lost; a share lets them
    /// out in order.
    @Test func gate_zeroBudget_holdsEverySendUntilAShareComes() async throws {
        let metrics = MetricsRegistry()
        let gate = Self.gate(budget: 0, metrics: metrics)
        let record = Record()
        for _ in 0..<3 { gate.offer(record.parked()) }
        #expect(record.runs == 0)
        #expect(metrics.value("fcm_send_rate_waits_total") == 3)
        gate.setBudget(1000)
        try await eventually("three sends ran") { record.runs == 3 }
        #expect(record.ran.all == [1, 2, 3])
        gate.setBudget(0)
        gate.offer(record.parked())
        #expect(record.runs == 3)
    }

    /// The project's QUOTA_EXCEEDED that opens a pause lowers the cap below the measured rate and pauses at least as
    /// long as asked; a quota 429 answering a send that left before the pause is counted and changes nothing more.
    @Test func gate_quotaFault_lowersTheCap_andPausesAtLeastTheMinimum() throws {
        let metrics = MetricsRegistry()
        let gate = Self.gate(metrics: metrics)
        let record = Record()
        for _ in 0..<200 { gate.offer(record.parked()) }
        var pause: Duration?
        for ticket in 1...3 as ClosedRange<UInt64> {
            pause = gate.fault(.overload, reason: "QUOTA_EXCEEDED", retryAfter: nil, minimumPause: .seconds(60), quota: true, ticket: ticket) ?? pause
        }
        #expect(pause.map { $0 >= .seconds(60) } == true)
        let limit = gate.rateLimitState
        let cap = try #require(limit.cap)
        let hit = try #require(limit.hitRate)
        // 200 sends measured over at least one 100 ms slot: at most 2,000/s; the cap is 70% of what was measured.
        #expect(hit <= 2000 && cap <= 0.7 * hit + 1e-6)
        #expect(metrics.value("fcm_send_rate_limit") == cap)
        #expect(metrics.value("fcm_quota_exceeded_total") == 3)
        gate.fault(.overload, reason: "QUOTA_EXCEEDED", retryAfter: nil, minimumPause: .seconds(60), quota: true, ticket: 4)
        #expect(gate.rateLimitState.cap == cap)
        #expect(metrics.value("fcm_quota_exceeded_total") == 4)
        // A 5xx pause (not the quota) leaves the cap alone.
        let other = Self.gate(metrics: MetricsRegistry())
        for _ in 0..<10 { other.offer(record.parked()) }
        for ticket in 1...3 as ClosedRange<UInt64> { other.fault(.overload, reason: "UNAVAILABLE", retryAfter: nil, ticket: ticket) }
        #expect(other.rateLimitState.cap == nil)
    }

    /// With a budget below the project's quota the sender never gets a quota 429, and no second of the emulator's
    /// sees more than the budget plus the burst.
    @Test func sender_underABudget_staysUnderTheQuota() async throws {
        let budget = 60.0
        // The quota's burst (20) leaves room for a stall of about 300 ms of a thread on a loaded machine.
        let rig = try FCMSenderTests.rig(maxSendsPerSecond: budget, projectQuota: (rate: 100, burst: 20))
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        // The access token and the connection first, as the daemon has them before the backlog: sends paced while
        // either is awaited would leave together once it comes.
        guard case .sent = await rig.sender.send(FCMSenderTests.push("warm-up")) else { Issue.record("warm-up not sent"); return }
        let outcomes = await withTaskGroup(of: SendOutcome.self, returning: [SendOutcome].self) { group in
            for index in 0..<100 { group.addTask { await rig.sender.send(FCMSenderTests.push("good-\(index)")) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.allSatisfy { if case .sent = $0 { true } else { false } })
        #expect(rig.emulator.stats.sendsByOutcome["project_quota_exceeded"] == nil)
        #expect(rig.metrics.value("fcm_send_rate_limit") == budget)
        #expect((rig.metrics.value("fcm_send_rate_waits_total") ?? 0) > 0)
        // Sends per sliding second at the emulator: the budget plus the burst (1), with room for arrivals bunched by
        // the network and the scheduler.
        let arrivals = rig.emulator.receivedMessages.map(\.receivedAt).sorted()
        var busiest = 0
        var first = 0
        for (index, arrival) in arrivals.enumerated() {
            while arrival.timeIntervalSince(arrivals[first]) >= 1 { first += 1 }
            busiest = max(busiest, index - first + 1)
        }
        #expect(busiest <= Int(budget) + Int(TokenBucket.burst(forRate: budget)) + 12, "busiest second: \(busiest)")
    }

    /// Without a budget, the project's QUOTA_EXCEEDED without Retry-After pauses sending; it then resumes, after a
    /// probe, at a rate below the one that hit the quota, and what was parked goes out.
    @Test func sender_afterAQuota429_resumesBelowTheRateThatHitIt() async throws {
        let rig = try FCMSenderTests.rig(quotaPause: .milliseconds(200), projectQuota: (rate: 40, burst: 5))
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        #expect(rig.sender.sendRateLimit == nil)
        func wave(_ range: Range<Int>) async -> [SendOutcome] {
            await withTaskGroup(of: SendOutcome.self, returning: [SendOutcome].self) { group in
                for index in range { group.addTask { await rig.sender.send(FCMSenderTests.push("good-\(index)")) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
        }
        // At full speed into the quota: 429s, and a pause.
        var outcomes = await wave(0..<120)
        #expect(rig.sender.sendRateLimit != nil)
        // Sent during the pause: parked, then a probe, then the rest at the lowered pace.
        outcomes += await wave(120..<180)
        let quota429s = outcomes.count { $0 == .retry(reason: "QUOTA_EXCEEDED", after: nil, minimumBackoff: .seconds(60)) }
        let sent = outcomes.count { if case .sent = $0 { true } else { false } }
        #expect(quota429s + sent == 180)
        #expect(quota429s > 0)
        #expect((rig.metrics.value("fcm_probes_total") ?? 0) >= 1)
        let limit = rig.sender.gateRateLimit
        let cap = try #require(limit.cap)
        let hit = try #require(limit.hitRate)
        #expect(cap < hit)
        #expect(rig.metrics.value("fcm_send_rate_limit") == cap)
        #expect(rig.metrics.value("fcm_quota_exceeded_total") == Double(quota429s))
        #expect((rig.metrics.value("fcm_send_rate_waits_total") ?? 0) > 0)
    }
}

extension FCMSender {
    /// The gate's pacing state, for tests.
    var gateRateLimit: SendRateLimit { gate.rateLimitState }
}

extension SendGate {
    /// Submits `send` as `FCMSender` does: a send the gate lets leave now runs at once, with its ticket.
    func offer(_ send: Send) {
        if let ticket = submit(send) { send.run(ticket) }
    }
}
