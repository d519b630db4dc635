import Foundation
import Metrics
import Outbox
import Postgres
import Push
import Synchronization
import Testing
import TestSupport

/// The window on the wire follows FCM's answer time (SPEC §3, "FCM's answer time"), in the real engine and PostgreSQL:
/// a rising answer time is FCM asking for less.
@Suite("The window on the wire and FCM's answer time", .blockingFixtures)
struct AnswerTimeTests {
    /// FCM answers in 20 ms, then, after the first 1,000 of 3,000 deliveries, in 40 ms (FCM slowing under load). The
    /// window (`push_send_window`) shrinks below its maximum, and the drain still ends with every delivery SENT once, at
    /// its first attempt: the window's shrinking is no retry, no FAILED and no second send.
    @Test func answerTimeDoublingMidDrain_shrinksTheWindow_withoutRetriesOrErrors() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatients(150, devicesEach: 20, events: 150)
            let sender = FakeSender(delay: .milliseconds(20))
            let (worker, metrics, _) = makeWorker(conninfo, sender: sender) { configuration in
                configuration.maxInFlight = 200
                configuration.maxSending = 100  // the daemon's split: half on the wire
                configuration.batchSize = 25
            }
            let maximum = 100
            let narrowestAfterDoubling = Mutex(Int.max)
            let watcher = Task {
                var doubled = false
                while !Task.isCancelled {
                    if !doubled, sender.pushes.count >= 1_000 {
                        sender.setDelay(.milliseconds(40))
                        doubled = true
                    }
                    if doubled, let window = metrics.value("push_send_window") {
                        narrowestAfterDoubling.withLock { $0 = min($0, Int(window)) }
                    }
                    try? await Task.sleep(for: .milliseconds(1))
                }
            }
            try await worker.drain()
            watcher.cancel()
            await watcher.value

            let narrowest = narrowestAfterDoubling.withLock { $0 }
            #expect(narrowest < maximum, "the window after the doubling never went below \(maximum)")
            let rows = try db.connection.query(#"""
                SELECT count(*) FILTER (WHERE status = \#(literal: DeliveryStatus.sent) AND attempts = 1) AS first, count(*) AS n FROM "PushDelivery"
                """#)[0]
            #expect(try rows["n"].int() == 3_000)
            #expect(try rows["first"].int() == 3_000)
            #expect(sender.pushes.count == 3_000)
            #expect(Set(sender.pushes.map { "\($0.eventKey) \($0.token)" }).count == 3_000)
            #expect(try db.connection.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#)[0]["n"].int() == 150)
        }
    }
}
