import FCM
import FCMEmulator
import Foundation
import Lifecycle
import Metrics
@testable import Outbox
import Postgres
import Synchronization
import Testing
import TestSupport

/// A database that records outcomes slower than FCM answers (a row trigger the API team could add
/// tomorrow): sending slows to the database's pace, answered-but-unwritten work stays within
/// `MAX_IN_FLIGHT`, keeps its lease, and nothing is sent twice.
@Suite("Backpressure: a database slower than FCM", .blockingFixtures)
struct BackpressureTests {
    /// Every status change of a delivery sleeps `milliseconds` in a BEFORE UPDATE row trigger.
    static func slowDeliveryUpdates(_ db: Fixtures, milliseconds: Int) throws {
        try db.connection.query("""
            CREATE FUNCTION test_slow_delivery_update() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.status IS DISTINCT FROM OLD.status THEN PERFORM pg_sleep(\(unescaped: "\(Double(milliseconds) / 1000)")); END IF;
                RETURN NEW;
            END $$
            """)
        try db.connection.query("""
            CREATE TRIGGER test_slow_delivery_update BEFORE UPDATE ON "PushDelivery"
            FOR EACH ROW EXECUTE FUNCTION test_slow_delivery_update()
            """)
    }

    /// The first `times` status changes of deliveries are cancelled as a statement timeout cancels them (57014,
    /// `query_canceled`), counted by a sequence, which a rolled-back transaction does not roll back.
    static func cancelDeliveryUpdates(_ db: Fixtures, times: Int) throws {
        try db.connection.query("CREATE SEQUENCE test_cancelled_updates")
        try db.connection.query("""
            CREATE FUNCTION test_cancel_delivery_update() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.status IS DISTINCT FROM OLD.status AND nextval('test_cancelled_updates') <= \(unescaped: String(times)) THEN
                    RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = 'query_canceled';
                END IF;
                RETURN NEW;
            END $$
            """)
        try db.connection.query("""
            CREATE TRIGGER test_cancel_delivery_update BEFORE UPDATE ON "PushDelivery"
            FOR EACH ROW EXECUTE FUNCTION test_cancel_delivery_update()
            """)
    }

    /// A completion flush past `statement_timeout` is the database too slow this time, not a bad row: it is written
    /// again whole, every event ends DONE and every push is sent once (before: the flush was split and its rows written
    /// one at a time, the first of which was cancelled too and taken as refused: its delivery left to be sent again, or
    /// its event DEAD with every push sent).
    @Test func completionPastTheStatementTimeout_isWrittenAgain_notRefused() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a", "token-b"])
            for group in 0..<10 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "timeout-\(group)")) }
            try Self.cancelDeliveryUpdates(db, times: 2)
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            let statuses = try db.connection.query(#"SELECT status, count(*) AS n FROM "PushOutbox" GROUP BY status"#)
                .map { "\(try $0["status"].string())=\(try $0["n"].int())" }
            #expect(statuses == ["DONE=10"])
            #expect(sender.pushes.count == 20)
            #expect(Set(sender.pushes.map { "\($0.token) \($0.eventKey)" }).count == 20)
            #expect(try Self.sentRows(db) == 20)
        }
    }

    /// The database refuses every outcome write for a while (a statement timeout, or an API trigger), while the lease
    /// extensions go through: the completer retries, and between its tries the heartbeat renews the leases of what was
    /// answered, so no other instance claims it and sends it again (before: the completer kept the write turn through
    /// its retries, the heartbeat waited behind it, and the leases lapsed). Once the writes go through, the push is
    /// recorded, sent once.
    @Test func outcomesRefusedForAWhile_theHeartbeatKeepsRenewingTheirLeases() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "refused-for-a-while"))
            try Self.cancelDeliveryUpdates(db, times: 1_000_000)
            let sender = FakeSender()
            let (engine, _, _) = makeWorker(conninfo, sender: sender) { $0.lease = .seconds(6) }
            let stop = StopSignal()
            let running = Task { await engine.run(until: stop) }
            /// The delivery's lease: its token and expiry (epoch seconds).
            func lease() throws -> (token: String, expiry: Double)? {
                try db.connection.query(#"SELECT "leaseToken"::text AS t, extract(epoch FROM "leaseExpiresAt")::float8 AS s FROM "PushDelivery" WHERE "leaseToken" IS NOT NULL"#)
                    .first.map { (try $0["t"].string(), try $0["s"].double()) }
            }
            let deadline = ContinuousClock.now + .seconds(30)
            var first: (token: String, expiry: Double)?
            while ContinuousClock.now < deadline, first == nil {
                if !sender.pushes.isEmpty { first = try lease() }
                try await Task.sleep(for: .milliseconds(20))
            }
            let answered = try #require(first, "the push was not answered")
            // Until that lease is renewed past its first expiry, or it is gone or past (as before: it lapsed, and the
            // delivery was claimed again under a new lease and sent a second time).
            var renewed = false
            while ContinuousClock.now < deadline {
                let now = try db.connection.query("SELECT extract(epoch FROM now())::float8 AS s")[0]["s"].double()
                guard let current = try lease(), current.token == answered.token, now < answered.expiry + 1 else { break }
                if current.expiry > answered.expiry { renewed = true; break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(renewed, "the answered delivery's lease was not renewed while its outcome was refused")

            try db.connection.query(#"DROP TRIGGER test_cancel_delivery_update ON "PushDelivery""#)
            while ContinuousClock.now < deadline, try db.eventStatus(id).status == .pending {
                try await Task.sleep(for: .milliseconds(20))
            }
            stop.request(grace: .seconds(5))
            await running.value
            #expect(try db.eventStatus(id).status == .done)
            #expect(try Self.sentRows(db) == 1)
            #expect(sender.pushes.count == 1)
        }
    }

    static func sentRows(_ db: Fixtures) throws -> Int {
        try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.sent)"#)[0]["n"].int()
    }

    /// Both splits: every place on the wire, and the daemon's (half on the wire, so sends go on while the other
    /// half's outcomes are written). Either way, sends in flight plus unwritten outcomes stay within `MAX_IN_FLIGHT`.
    @Test(arguments: [nil, 10])
    func slowDatabase_answeredButUnwrittenNeverExceedsMaxInFlight_andNothingIsSentTwice(maxSending: Int?) async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await withEmulatorSender(maxInFlight: maxSending ?? 20) { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatients(100, devicesEach: 2, events: 1_000)
                try Self.slowDeliveryUpdates(db, milliseconds: 2)
                let maxInFlight = 20
                let (engine, metrics, _) = makeWorker(conninfo, sender: sender) {
                    $0.maxInFlight = maxInFlight
                    $0.maxSending = maxSending
                    $0.batchSize = 50
                }
                let sampler = try Fixtures(conninfo)
                let largest = Mutex((gap: 0, unwritten: 0.0, samples: 0))
                let sampling = Task {
                    while !Task.isCancelled {
                        // FCM's answers first, then the rows: a write landing in between only makes the gap look smaller
                        // by what was written, never larger.
                        let stats = emulator.stats
                        let accepted = stats.distinctAccepted + stats.duplicates
                        let sent = try Self.sentRows(sampler)
                        let unwritten = metrics.value("push_outcomes_unwritten") ?? 0
                        largest.withLock { $0 = (max($0.gap, accepted - sent), max($0.unwritten, unwritten), $0.samples + 1) }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                }
                try await engine.drain()
                sampling.cancel()
                _ = await sampling.result
                let seen = largest.withLock { $0 }
                #expect(seen.samples > 20)
                #expect(seen.gap <= maxInFlight, "FCM had answered \(seen.gap) sends more than the database recorded")
                #expect(seen.unwritten <= Double(maxInFlight))
                #expect(seen.unwritten > 0)  // the gauge moved: outcomes did wait for the slow writes
                #expect(try Self.sentRows(db) == 2_000)
                #expect(emulator.stats.duplicates == 0)
                #expect(emulator.stats.distinctAccepted == 2_000)
                #expect(metrics.value("push_outcomes_unwritten") == 0)
                #expect(metrics.render().contains("push_completer_flush_seconds_count"))
                // One latency observation per SENT delivery.
                #expect(metrics.render().contains("push_delivery_latency_seconds_count 2000\n"))
            }
        }
    }

    /// A stop while the slow database still has answered outcomes to write: they are all written before the
    /// engine returns, nothing stays leased, and a later run sends only what was never sent.
    @Test func stopWithAnswersUnwritten_writesThemAll_andTheNextRunSendsNothingTwice() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await withEmulatorSender(maxInFlight: 20) { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatients(50, devicesEach: 2, events: 300)
                try Self.slowDeliveryUpdates(db, milliseconds: 5)
                let (engine, metrics, _) = makeWorker(conninfo, sender: sender) { $0.maxInFlight = 20 }
                let stop = StopSignal()
                async let running: Void = engine.run(until: stop)
                try await eventually("40 rows are sent", timeout: .seconds(30)) { try Self.sentRows(db) >= 40 }
                stop.request(grace: .seconds(7))
                await running
                let stats = emulator.stats
                #expect(try Self.sentRows(db) == stats.distinctAccepted, "every answered send is recorded before the engine returns")
                #expect(metrics.value("push_outcomes_unwritten") == 0)
                let leased = try db.connection.query(#"""
                    SELECT (SELECT count(*) FROM "PushOutbox" WHERE "leaseToken" IS NOT NULL)
                         + (SELECT count(*) FROM "PushDelivery" WHERE "leaseToken" IS NOT NULL) AS n
                    """#)[0]["n"].int()
                #expect(leased == 0)
                try await makeWorker(conninfo, sender: sender).0.drain()
                #expect(try Self.sentRows(db) == 600)
                #expect(emulator.stats.duplicates == 0)
            }
        }
    }
}
