import Foundation
import Metrics
import Logging
@testable import Outbox
import Postgres
import Testing
import TestSupport

@Suite("Retention and index health", .blockingFixtures)
struct RetentionTests {
    func pruner(_ conninfo: String) -> Pruner {
        Pruner(client: PostgresClient(conninfo: conninfo, maxConnections: 1),
               configuration: .init(outboxRetention: .seconds(7 * 86_400), deliveryRetention: .seconds(30 * 86_400)),
               logger: Logger(label: "retention", sink: MemorySink()), metrics: MetricsRegistry())
    }

    @Test func prune_removesOldFinishedRowsKeepsNewDeadAndPendingOnes() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.device(owner: "c1", token: "t", id: "d1")
            try db.device(owner: "c1", token: "t2", id: "d2")
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "processedAt", "eventKey", "createdAt") VALUES
                ('DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.done),    now() - interval '8 days', 'k-old-done', now() - interval '8 days'),
                ('DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.expired), now() - interval '8 days', 'k-old-exp', now() - interval '9 days'),
                ('DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.done),    now() - interval '6 days', 'k-new-done', now() - interval '6 days'),
                ('DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.dead),    now() - interval '60 days', 'k-dead', now() - interval '60 days'),
                ('DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.pending), NULL, 'k-pending', now() - interval '40 days')
                """#)
            try db.connection.query(#"""
                INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, "createdAt") VALUES
                ('old-sent', 'k-old-done', 'd1', \#(literal: DeliveryStatus.sent), now() - interval '31 days'),
                ('old-of-pending', 'k-pending', 'd1', \#(literal: DeliveryStatus.sent), now() - interval '40 days'),
                ('old-pending-of-pending', 'k-pending', 'd2', \#(literal: DeliveryStatus.pending), now() - interval '40 days'),
                ('new-sent', 'k-new-done', 'd1', \#(literal: DeliveryStatus.sent), now() - interval '29 days')
                """#)
            let summary = try await pruner(conninfo).runOnce()
            #expect(summary.ranPass && summary.outboxDeleted == 2 && summary.deliveriesDeleted == 1)
            let keys = try db.connection.query(#"SELECT "eventKey" FROM "PushOutbox" ORDER BY 1"#).map { try $0["eventKey"].string() }
            #expect(keys == ["k-dead", "k-new-done", "k-pending"])
            let deliveries = try db.connection.query(#"SELECT id FROM "PushDelivery" ORDER BY 1"#).map { try $0["id"].string() }
            #expect(deliveries == ["new-sent", "old-of-pending", "old-pending-of-pending"])
        }
    }

    @Test func prune_skipsWhileAnotherInstanceHoldsTheLease_andRunsOnceItIsReleased() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            let other = SingletonLease(name: "retention", duration: .seconds(60))
            #expect(try other.acquire(connection))
            #expect(try await pruner(conninfo).runOnce().ranPass == false)
            try other.release(connection)
            let mine = pruner(conninfo)
            #expect(try await mine.runOnce().ranPass == true)
            // The holder renews its own lease; another holder cannot take it while it runs.
            #expect(try await mine.runOnce().ranPass == true)
            #expect(try other.acquire(connection) == false)
            // Nothing is left held on the server: no advisory lock in this database (tests running beside it use others).
            #expect(try connection.query(TestDatabase.advisoryLocksHere)[0]["n"].int() == 0)
        }
    }

    /// The gauges' statement reads partial indexes and statistics: no sequential scan of the outbox, whatever
    /// retention keeps. Prints its time at 0 and at 1,000,000 kept rows, beside an exact count's.
    @Test func statusGauges_countWithoutScanningKeptHistory() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            func timed(_ body: () throws -> Void) rethrows -> Duration {
                let clock = ContinuousClock()
                try body()  // warm
                let start = clock.now
                for _ in 0..<5 { try body() }
                return (clock.now - start) / 5
            }
            let empty = try timed { _ = try QueueGauges.compute(db.connection) }
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "processedAt", "createdAt")
                SELECT 'DOSE_TAKEN', 'p', '{}', CASE WHEN g % 1000 = 0 THEN \#(literal: OutboxStatus.expired) WHEN g % 997 = 0 THEN \#(literal: OutboxStatus.dead) ELSE \#(literal: OutboxStatus.done) END,
                       now(), now() FROM generate_series(1, 1000000) g
                """#)
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload) SELECT 'DOSE_TAKEN', 'p', '{}' FROM generate_series(1, 30)
                """#)
            try db.connection.query(#"VACUUM ANALYZE "PushOutbox""#)
            let plan = try db.connection.query("EXPLAIN \(sql: QueueGauges.countQuery)").map { try $0["QUERY PLAN"].string() }.joined(separator: "\n")
            #expect(!plan.contains("Seq Scan"), "\(plan)")
            let snapshot = try QueueGauges.compute(db.connection)
            #expect(snapshot.events[.pending] == 30)
            #expect(snapshot.events[.expired] == 1000)
            #expect(snapshot.events[.dead] == 1002)  // multiples of 997 up to 1,000,000 that are not multiples of 1000
            let done = snapshot.events[.done] ?? 0
            #expect(done > 950_000 && done < 1_050_000, "DONE estimate \(done)")
            let full = try timed { _ = try QueueGauges.compute(db.connection) }
            let exact = try timed { _ = try db.connection.query(#"SELECT status, count(*) AS n FROM "PushOutbox" GROUP BY status"#) }
            print("status gauges: \(empty) at 0 kept rows, \(full) at 1,000,000 (an exact count by status: \(exact))")
        }
    }

    @Test func retentionPasses_runAtLeastOnceAMinuteAndFasterForShortRetention() {
        #expect(Pruner.Configuration(outboxRetention: .seconds(7 * 86_400), deliveryRetention: .seconds(30 * 86_400)).passInterval == .seconds(60))
        #expect(Pruner.Configuration(outboxRetention: .seconds(30), deliveryRetention: .seconds(3600)).passInterval == .seconds(15))
    }

    /// With 200,000 finished rows present, the claim still reads only the partial index of PENDING rows.
    @Test func claimPlan_usesThePartialIndexWith200kFinishedRows() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "processedAt", "createdAt")
                SELECT 'DOSE_TAKEN', 'p', '{}', \#(literal: OutboxStatus.done), now(), now() FROM generate_series(1, 200000)
                """#)
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload) SELECT 'DOSE_TAKEN', 'p', '{}' FROM generate_series(1, 100)
                """#)
            try db.connection.query(#"ANALYZE "PushOutbox""#)
            let plan = try db.connection.withTransaction { connection in
                let claim = OutboxStore.claimQuery(limit: 100, worker: "w", token: LeaseToken(), lease: .seconds(60))
                return try connection.query("EXPLAIN \(sql: claim)")
                    .map { try $0["QUERY PLAN"].string() }.joined(separator: "\n")
            }
            #expect(plan.contains("PushOutbox_pending_due_idx"))
            #expect(!plan.contains("Seq Scan"))
        }
    }
    /// Statistics taken over finished events and an empty queue say the pending index holds one row; then a morning's
    /// backlog of 20,000 events arrives. Settling events by id (the completer's flush, finished events, heartbeat, release) must
    /// stay a primary-key probe per event, never a read of the whole pending queue: it did (a hash join over the
    /// pending index, 18,645 entries read per flush at 300k patients) while its guard matched the index's predicate.
    @Test func settlingEvents_withABacklogTheStatisticsDoNotKnow_neverReadsThePendingQueue() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.connection.query(#"ALTER TABLE "PushOutbox" SET (autovacuum_enabled = off)"#)
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "processedAt", "createdAt")
                SELECT 'DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.done), now(), now() FROM generate_series(1, 100000)
                """#)
            try db.connection.query(#"ANALYZE "PushOutbox""#)
            for _ in 0..<8 { _ = try db.enqueue(patient: "p1", payload: Fixtures.payload()) }
            // One connection, so that its statistics can be flushed on demand before they are read.
            let client = PostgresClient(conninfo: conninfo, maxConnections: 1)
            let store = OutboxStore(client: client)
            let claimed = try await store.claim(limit: 8, workerId: "a", lease: .seconds(60))
            #expect(claimed.count == 8)
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, "availableAt")
                SELECT 'DOSE_TAKEN', 'p1', '{}', now() + interval '1 hour' FROM generate_series(1, 20000)
                """#)
            func pendingIndexReads() async throws -> Int {
                _ = try await client.query("SELECT pg_stat_force_next_flush()")
                return try db.connection.query(#"""
                    SELECT idx_tup_read::int AS n FROM pg_stat_user_indexes WHERE indexrelname = 'PushOutbox_pending_due_idx'
                    """#)[0]["n"].int()
            }
            let before = try await pendingIndexReads()
            // One event per flush, more flushes than the server's five custom plans: the generic plan is used too.
            for event in claimed {
                _ = try await store.extendLeases(events: [(event.id, event.lease)], deliveries: [], lease: .seconds(60))
                let summary = try await store.complete(.init(settlements: [
                    EventSettlement(id: event.id, eventKey: "doseTaken:e\(event.id)", patientId: event.patientId, lease: event.lease, retryDelay: .seconds(1))
                ]), maxAttempts: 10)
                #expect(summary.eventStatuses[event.id] == .done)
            }
            let reads = try await pendingIndexReads() - before
            #expect(reads < 100)
        }
    }
}
