import Foundation
import Postgres
import Schema
import Testing
import TestSupport

@Suite("Migrations")
struct MigratorTests {
    @Test func migrate_appliesToEmptyDatabaseThenIsANoOp() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(connection)
            let first = try Migrator.migrate(connection)
            #expect(first.applied == Migrations.all.map(\.version))
            let schemaBefore = try snapshot(connection)
            let second = try Migrator.migrate(connection)
            #expect(second.applied.isEmpty)
            #expect(try snapshot(connection) == schemaBefore)
            #expect(try Migrator.currentVersion(connection) == Migrations.all.last?.version)
        }
    }

    @Test func migrate_twoConcurrentRunsBothSucceed() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            try TestDatabase.createAPITables(try PostgresConnection(conninfo: conninfo))
            let a = PostgresClient(conninfo: conninfo, maxConnections: 1)
            let b = PostgresClient(conninfo: conninfo, maxConnections: 1)
            async let first = Migrator().migrate(a)
            async let second = Migrator().migrate(b)
            let reports = try await [first, second]
            #expect(reports.map(\.applied.count).sorted() == [0, Migrations.all.count])
        }
    }

    @Test func migrate_withoutAPITablesNamesThem() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.query(#"CREATE TABLE "Patient" (id text PRIMARY KEY, "displayName" text NOT NULL)"#)
            let error = #expect(throws: PostgresError.self) { try Migrator.migrate(connection) }
            let message = error?.description ?? ""
            #expect(message.contains(#""PushDevice""#))
            #expect(message.contains(#""CaregiverEntitlement""#))
            #expect(!message.contains(#""Patient""#))
            #expect(try Migrator.currentVersion(connection) == nil)
        }
    }

    @Test func insertTrigger_notifiesOncePerStatement() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let listener = try PostgresConnection(conninfo: conninfo)
            try listener.listen(Migrations.notifyChannel)
            let writer = try PostgresConnection(conninfo: conninfo)
            try writer.query("""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload)
                SELECT 'DOSE_TAKEN', 'p' || g, '{}'::jsonb FROM generate_series(1, 5) g
                """)
            var received: [PostgresConnection.Notification] = []
            for _ in 0..<20 {
                received += try listener.waitForNotifications(timeout: .milliseconds(100))
                if !received.isEmpty, try listener.waitForNotifications(timeout: .milliseconds(100)).isEmpty { break }
            }
            #expect(received.count == 1)
        }
    }

    private func snapshot(_ connection: PostgresConnection) throws -> [String] {
        try connection.query("""
            SELECT table_name || '.' || column_name || ':' || data_type || ':' || coalesce(column_default, '') AS c
            FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1
            """).map { try $0["c"].string() }
            + connection.query("SELECT indexname AS c FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1").map { try $0["c"].string() }
    }
}
