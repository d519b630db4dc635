import FCM
import Logging
import Foundation
import Outbox
import Postgres
import Testing
import TestSupport

@Suite("Delivery pipeline: graceful stop")
struct GracefulStopTests {
    /// A stop requested while sends hang past the grace period: whatever finished is recorded,
    /// everything else is released (due again at once, attempt not counted), nothing stays leased.
    @Test func stopDuringHungSends_releasesEverythingUnfinished() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["fast-token", "hung-token"])
            for group in 0..<5 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
            let started = AsyncStream<Void>.makeStream()
            let sender = SlowSender(slowToken: "hung-token", delay: 3) { started.continuation.yield() }
            let stop = StopSignal()
            var configuration = OutboxWorkerConfiguration()
            configuration.lanes = 1
            let worker = OutboxWorker(client: PostgresClient(conninfo: conninfo), sender: sender, configuration: configuration,
                                      logger: .init(label: "t", sink: MemorySink()), metrics: .init(), stop: stop)
            let running = Task { await worker.run() }
            var iterator = started.stream.makeAsyncIterator()
            await iterator.next()
            stop.request(grace: .milliseconds(200))
            await running.value
            let leased = try db.connection.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE "leaseToken" IS NOT NULL"#)[0]["n"].int()
            let leasedDeliveries = try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE "leaseToken" IS NOT NULL"#)[0]["n"].int()
            #expect(leased == 0)
            #expect(leasedDeliveries == 0)
            let pending = try db.connection.query(#"""
                SELECT count(*) AS n, bool_and("availableAt" <= now()) AS due, max(attempts) AS attempts
                FROM "PushOutbox" WHERE status = 'PENDING'
                """#)[0]
            #expect(try pending["n"].int() == 5)
            #expect(try pending["due"].bool())
            #expect(try pending["attempts"].int() == 0)
            // The fast deliveries that completed before the deadline are recorded as SENT.
            let sent = try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE status = 'SENT'"#)[0]["n"].int()
            #expect(sent >= 1)
        }
    }
}

/// Answers "hung-token" only after `delay` seconds (on a GCD thread, like a slow network), the rest at once.
final class SlowSender: PushSender, @unchecked Sendable {
    let slowToken: String
    let delay: Double
    let onSlowStart: @Sendable () -> Void

    init(slowToken: String, delay: Double, onSlowStart: @escaping @Sendable () -> Void) {
        self.slowToken = slowToken
        self.delay = delay
        self.onSlowStart = onSlowStart
    }

    func send(_ push: DoseTakenPush) async -> SendOutcome {
        guard push.token == slowToken else { return .sent(messageName: "projects/p/messages/fast") }
        onSlowStart()
        let delay = self.delay
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) { continuation.resume() }
        }
        return .sent(messageName: "projects/p/messages/slow")
    }
}
