import FCM
import Foundation
import Lifecycle
import Logging
import Metrics
@testable import Outbox
import Postgres
import Testing
import TestSupport

/// The API team changes its tables while a worker delivers (Prisma migrations): columns, a table, an index and a
/// row trigger added, a column dropped again. The worker's statements name their columns and its prepared
/// statements are replanned by PostgreSQL, so every push still goes out exactly once.
@Suite("Schema drift while delivering", .blockingFixtures)
struct SchemaDriftTests {
    @Test func apiTablesChangeWhileDelivering_everyPushGoesOutOnce() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatients(50, devicesEach: 2, events: 0)
            let sender = FakeSender()
            // The daemon's client: transaction settings, so claim, fan-out and flush all run as prepared statements.
            var configuration = DeliveryEngineConfiguration()
            configuration.pollInterval = .milliseconds(50)
            configuration.maxInFlight = 10
            configuration.batchSize = 10
            let engine = DeliveryEngine(
                client: PostgresClient(conninfo: conninfo, settings: .worker(statementTimeout: .seconds(30), lockTimeout: .seconds(5),
                                                                             asynchronousCommit: true)),
                sender: sender, configuration: configuration, logger: Logger(label: "outbox", sink: MemorySink()), metrics: MetricsRegistry())
            let stop = StopSignal()
            let running = Task { await engine.run(until: stop) }
            let drift: [PostgresQuery] = [
                #"ALTER TABLE "PushDelivery" ADD COLUMN "apiNote" text DEFAULT 'x'"#,
                #"ALTER TABLE "PushOutbox" ADD COLUMN "traceId" uuid"#,
                #"ALTER TABLE "PushDevice" ADD COLUMN "appVersion" text"#,
                #"ALTER TABLE "Patient" ADD COLUMN "nickname" text"#,
                #"CREATE TABLE "AuditLog" (id bigserial PRIMARY KEY, note text)"#,
                #"CREATE INDEX "PushDelivery_apiNote_idx" ON "PushDelivery" ("apiNote")"#,
                #"""
                CREATE FUNCTION api_audit() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN INSERT INTO "AuditLog" (note) VALUES (TG_OP || ' ' || NEW.id); RETURN NEW; END $$
                """#,
                #"CREATE TRIGGER api_audit AFTER UPDATE ON "PushDelivery" FOR EACH ROW EXECUTE FUNCTION api_audit()"#,
                #"ALTER TABLE "PushDelivery" DROP COLUMN "apiNote""#,
                #"ALTER TABLE "PushOutbox" DROP COLUMN "traceId""#,
            ]
            var enqueued = 0
            for (round, statement) in drift.enumerated() {
                for event in 0..<20 {
                    try db.enqueue(patient: "p\(1 + (round * 20 + event) % 50)", payload: Fixtures.payload(group: "drift-\(round)-\(event)"))
                    enqueued += 1
                }
                try await Task.sleep(for: .milliseconds(60))
                try db.connection.query(statement)
            }
            try await eventually("every enqueued event is DONE", timeout: .seconds(60)) {
                try db.connection.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#)[0]["n"].int() == enqueued
            }
            stop.request(grace: .seconds(5))
            await running.value
            let deliveries = try db.deliveries()
            #expect(deliveries.count == enqueued * 2)
            #expect(deliveries.allSatisfy { $0.status == .sent })
            #expect(sender.pushes.count == enqueued * 2)
            #expect(Set(sender.pushes.map { "\($0.eventKey)|\($0.token)" }).count == enqueued * 2)
            #expect(try db.connection.query(#"SELECT count(*) AS n FROM "AuditLog""#)[0]["n"].int() > 0)  // the trigger ran under the worker
        }
    }
}
