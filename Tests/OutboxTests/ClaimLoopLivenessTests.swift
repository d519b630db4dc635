import Foundation
import Lifecycle
import Logging
import Outbox
import Postgres
import Push
import Synchronization
import TestSupport
import Testing

/// The claim loops tell the daemon's watchdog and `/healthz` they are alive (`onProgress`) while they wait on something
/// outside them: an idle queue under a long poll interval, a claim the database does not answer, room that FCM's answers
/// or a database that is down must free. Before, they said so only once per pass, so any such wait past the stall limit
/// (25 s) withheld the watchdog's pings and systemd killed a daemon that was waiting correctly, dropping the outcomes
/// FCM had accepted. Here `aliveEvery` is 100 ms, and the longest silence watched over 3 s must stay under 2 s (before,
/// it was the whole wait).
@Suite("Claim loops stay alive while they wait", .blockingFixtures)
struct ClaimLoopLivenessTests {
    /// Runs an engine with `sender` and `configure`d settings, calls `whileRunning`, then watches the beats for 3 s and
    /// returns the longest silence seen.
    static func longestSilence(_ conninfo: String, sender: any PushSender = FakeSender(),
                               configure: (inout DeliveryEngineConfiguration) -> Void,
                               whileRunning: () async throws -> Void = {},
                               beforeStop: () throws -> Void = {}) async throws -> Duration {
        let lastBeat = Mutex(ContinuousClock.now)
        var configuration = DeliveryEngineConfiguration()
        configuration.aliveEvery = .milliseconds(100)
        configure(&configuration)
        let engine = DeliveryEngine(client: PostgresClient(conninfo: conninfo), sender: sender, configuration: configuration,
                                    logger: .init(label: "t", sink: MemorySink()), metrics: .init(),
                                    onProgress: { lastBeat.withLock { $0 = .now } })
        let stop = StopSignal()
        let running = Task { await engine.run(until: stop) }
        try await Task.sleep(for: .milliseconds(500))
        try await whileRunning()
        var longest = Duration.zero
        let end = ContinuousClock.now + .seconds(3)
        while ContinuousClock.now < end {
            longest = max(longest, ContinuousClock.now - lastBeat.withLock { $0 })
            try await Task.sleep(for: .milliseconds(20))
        }
        try beforeStop()
        stop.request(grace: .seconds(2))
        if let fake = sender as? FakeSender { fake.open() }
        await running.value
        return longest
    }

    /// Nothing to send, and a poll interval of 30 s (LISTEN delivers; the poll is the fallback).
    @Test func idleQueue_longPollInterval() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let silence = try await Self.longestSilence(conninfo) { $0.pollInterval = .seconds(30) }
            #expect(silence < .seconds(2), "silent for \(silence)")
        }
    }

    /// The API holds the outbox table in an open transaction (a lock the claim waits for: the database does not answer).
    @Test func claimTheDatabaseDoesNotAnswer() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let api = try PostgresConnection(conninfo: conninfo)
            let silence = try await Self.longestSilence(conninfo, configure: { $0.pollInterval = .milliseconds(50) }, whileRunning: {
                try api.query("BEGIN")
                try api.query(#"LOCK TABLE "PushOutbox" IN ACCESS EXCLUSIVE MODE"#)
                try await Task.sleep(for: .milliseconds(200))
            }, beforeStop: { try api.query("ROLLBACK") })
            #expect(silence < .seconds(2), "silent for \(silence)")
        }
    }

    /// Every place taken by sends FCM has not answered (or outcomes a database that is down cannot take): the claim
    /// loops wait for room.
    @Test func noRoom_sendsNotAnswered() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            for group in 0..<40 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "held-\(group)")) }
            let held = FakeSender(held: true)
            let silence = try await Self.longestSilence(conninfo, sender: held) {
                $0.maxInFlight = 2
                $0.highWaterFactor = 2
                $0.pollInterval = .milliseconds(50)
            }
            #expect(silence < .seconds(2), "silent for \(silence)")
        }
    }
}
