import FCM
import Foundation
import Logging
import Metrics
@testable import Outbox
import Postgres
import Schema
import Testing
import TestSupport

/// The worker behind PgBouncer 1.18 in transaction mode (SPEC §3 "Connection poolers"): every
/// transaction may land on a different server connection, and whatever a client leaves on a
/// session stays there for the next client.
@Suite("Through a transaction-mode PgBouncer", .blockingFixtures)
struct PoolerTests {
    static let settings = TransactionSettings.worker(statementTimeout: .seconds(30), lockTimeout: .seconds(5), asynchronousCommit: true)

    @Test func twoWorkersRetentionAndGauges_sendEachPairOnce_andLeaveNothingOnTheServer() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let pooled = try TestDatabase.poolerConninfo(conninfo)
            let db = try Fixtures(conninfo)
            try db.caredForPatients(50, devicesEach: 2, events: 300)
            // Old history for retention to find.
            try db.connection.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "processedAt", "eventKey")
                SELECT 'DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.done), now() - interval '30 days', 'old-' || g FROM generate_series(1, 40) g
                """#)

            let sender = FakeSender()
            func engine() -> DeliveryEngine {
                var configuration = DeliveryEngineConfiguration()
                configuration.pollInterval = .milliseconds(50)
                configuration.batchSize = 20
                return DeliveryEngine(client: PostgresClient(conninfo: pooled, maxConnections: 4, settings: Self.settings), sender: sender,
                                      configuration: configuration, logger: Logger(label: "outbox", sink: MemorySink()), metrics: MetricsRegistry())
            }
            let (a, b) = (engine(), engine())
            async let claimedA = a.drain()
            async let claimedB = b.drain()
            let (countA, countB) = try await (claimedA, claimedB)
            #expect(countA + countB == 300)
            let pushes = sender.pushes
            #expect(pushes.count == 600)
            #expect(Set(pushes.map { "\($0.eventKey)|\($0.token)" }).count == 600)
            #expect(try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.sent)"#)[0]["n"].int() == 600)

            // Both singletons: one instance runs while the other skips; the second runs once the first lets go.
            func pruner() -> Pruner {
                Pruner(client: PostgresClient(conninfo: pooled, maxConnections: 1, settings: Self.settings),
                       configuration: .init(outboxRetention: .seconds(7 * 86_400), deliveryRetention: .seconds(30 * 86_400)),
                       logger: Logger(label: "retention", sink: MemorySink()), metrics: MetricsRegistry())
            }
            let (first, second) = (pruner(), pruner())
            let pass = try await first.runOnce()
            #expect(pass.ranPass && pass.outboxDeleted == 40)
            #expect(try await second.runOnce().ranPass == false)
            let gaugesA = QueueGauges(client: PostgresClient(conninfo: pooled, maxConnections: 1, settings: Self.settings), metrics: MetricsRegistry())
            let gaugesB = QueueGauges(client: PostgresClient(conninfo: pooled, maxConnections: 1, settings: Self.settings), metrics: MetricsRegistry())
            let computed = try await gaugesA.refresh()
            let published = try await gaugesB.refresh()  // reads what A computed
            #expect(computed.events[.pending] == 0 && computed == published)
            await gaugesA.release()
            #expect(try await gaugesB.refresh().events[.pending] == 0)

            // Nothing is left on PgBouncer's server connections: no advisory lock, no session setting.
            #expect(try db.connection.query(TestDatabase.advisoryLocksHere)[0]["n"].int() == 0)
            let plain = PostgresClient(conninfo: pooled, maxConnections: 4)
            for _ in 0..<20 {
                let row = try await plain.query("SELECT current_setting('synchronous_commit') AS sc, current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt")[0]
                #expect(try row["sc"].string() == "on" && row["st"].string() == "0" && row["lt"].string() == "0")
            }
        }
    }

    /// `migrate` through the pooler: the lease row instead of a session lock, index builds outside a transaction.
    @Test func migrate_throughThePooler_buildsEveryIndexAndLeavesNoLock() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let direct = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(direct)
            let pooled = try PostgresConnection(conninfo: try TestDatabase.poolerConninfo(conninfo))
            let report = try Migrator.migrate(pooled)
            #expect(report.applied == Migrations.all.map(\.version))
            let indexes = Migrations.all.flatMap(\.concurrentIndexes).map(\.name)
            let valid = try direct.query("SELECT count(*) AS n FROM pg_index WHERE indisvalid AND indexrelid::regclass::text = ANY(\(indexes.map { "\"\($0)\"" }))")[0]["n"].int()
            #expect(valid == indexes.count)
            #expect(try direct.query(TestDatabase.advisoryLocksHere)[0]["n"].int() == 0)
            #expect(try Migrator.migrate(pooled).applied.isEmpty)
        }
    }
}
