import Foundation
import Outbox
import Postgres
import Schema
import Synchronization
import TestSupport
import Testing

@Suite("Migrations", .blockingFixtures)
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

    /// An interrupted `CREATE INDEX CONCURRENTLY` leaves an invalid index behind; the next `migrate` drops and rebuilds it.
    @Test func migrate_rebuildsAnIndexAnInterruptedBuildLeftInvalid() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(connection)
            _ = try Migrator.migrate(connection)
            try connection.query(#"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '"PushDelivery_createdAt_idx"'::regclass"#)
            try connection.query(#"DELETE FROM "_medication_worker_migrations" WHERE version >= 2"#)
            let report = try Migrator.migrate(connection)
            #expect(report.applied == Migrations.all.map(\.version).filter { $0 >= 2 })
            let valid = try connection.query(#"SELECT indisvalid AS v FROM pg_index WHERE indexrelid = '"PushDelivery_createdAt_idx"'::regclass"#)
            #expect(try valid.first?["v"].bool() == true)
        }
    }

    /// `migrate` on a 1,000,000-row `"PushDelivery"` while the API keeps inserting: index builds run
    /// CONCURRENTLY and DDL waits with a lock timeout, so the writer keeps going. Prints the longest stall.
    @Test func migrate_onAMillionDeliveries_keepsAConcurrentWriterGoing() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let setup = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(setup)
            try setup.query(#"INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d1', \#(literal: OwnerType.caregiver), 'c1', 't1')"#)
            try setup.query(#"""
                INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", "createdAt")
                SELECT 'old-' || g, 'k-' || g, 'd1', now() - g * interval '1 second' FROM generate_series(1, 1000000) g
                """#)
            try setup.query(#"VACUUM ANALYZE "PushDelivery""#)

            let writer = InsertWriter(conninfo: conninfo)
            writer.start()
            try await Task.sleep(for: .milliseconds(300))
            let clock = ContinuousClock()
            let before = writer.inserted
            let started = clock.now
            let report = try Migrator.migrate(try PostgresConnection(conninfo: conninfo))
            let took = clock.now - started
            let during = writer.inserted - before
            try await Task.sleep(for: .milliseconds(300))
            let stats = writer.stop()
            #expect(report.applied == Migrations.all.map(\.version))
            #expect(stats.error == nil, "\(stats.error ?? "")")
            #expect(during > 0)
            // A plain CREATE INDEX on the million rows would hold the writer for most of the run.
            #expect(stats.longestStall < took / 2, "longest stall \(stats.longestStall) of \(took)")
            print("migrate on 1,000,000 PushDelivery rows: \(took); concurrent writer: \(during) inserts during it, longest insert stall \(stats.longestStall)")
        }
    }

    /// Migrations add, never drop (SPEC §2.2): during a rolling upgrade the daemons of the version before run against
    /// the new schema. Applied one version at a time, as each release would, every column an earlier migration made
    /// is still there after each later one (before: migration 9 renamed `vouched`, and the older daemons' disables
    /// failed with 42703 until they were upgraded).
    @Test func everyMigration_keepsEveryColumnTheEarlierOnesMade() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(connection)
            func columns() throws -> Set<String> {
                Set(try connection.query("""
                    SELECT table_name || '.' || column_name AS c FROM information_schema.columns WHERE table_schema = 'public'
                    """).map { try $0["c"].string() })
            }
            var before = try columns()
            for migration in Migrations.all {
                var migrator = Migrator()
                migrator.migrations = Migrations.all.filter { $0.version <= migration.version }
                _ = try migrator.migrate(connection)
                let after = try columns()
                #expect(before.subtracting(after).isEmpty, "migration \(migration.version) dropped \(before.subtracting(after).sorted())")
                before = after
            }
        }
    }

    /// An index on a table the API reads and writes is built CONCURRENTLY, outside the migration's transaction: built
    /// inside it, after DDL took ACCESS EXCLUSIVE, it holds the API's every read and write of that table for the whole
    /// build (migration 4's entitlement index did). An index inside the transaction is only for a table that migration
    /// itself creates.
    @Test func transactionalIndexes_areOnlyOnTablesTheirMigrationCreates() {
        func quotedName(after keyword: String, in text: String) -> String? {
            guard let range = text.range(of: keyword) else { return nil }
            let rest = text[range.upperBound...].drop { $0 == " " || $0 == "\n" }
            guard rest.first == "\"" else { return nil }
            return String(rest.dropFirst().prefix { $0 != "\"" })
        }
        for migration in Migrations.all {
            let texts = migration.statements.map(\.description)
            let created = Set(texts.compactMap { quotedName(after: "CREATE TABLE IF NOT EXISTS", in: $0) })
            for text in texts where text.contains("CREATE INDEX") || text.contains("CREATE UNIQUE INDEX") {
                let table = quotedName(after: " ON ", in: text)
                #expect(table.map(created.contains) == true,
                        "migration \(migration.version) builds an index on \(table ?? "?") inside its transaction; use concurrentIndexes")
            }
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

    /// `migrate` as the daemon's least-privilege role (`sql/roles.sql`) says which role it needs, whether or not there is
    /// work to do. Before, it failed with "permission denied" on an upgrade and passed silently on a current schema.
    @Test func migrate_asTheLeastPrivilegeRole_namesTheOwnerItNeeds() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let owner = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(owner)
            _ = try Migrator.migrate(owner)
            let ownerName = try owner.query("SELECT current_user AS me").first?["me"].string() ?? "?"
            try await LeastPrivilegeRole.with(owner: conninfo) { leastPrivilege in
                let role = String(leastPrivilege.split(separator: "=").last ?? "")
                let connection = try PostgresConnection(conninfo: leastPrivilege)
                let error = #expect(throws: PostgresError.self) { try Migrator.migrate(connection) }
                let message = error?.description ?? ""
                #expect(message.contains("migrate must run as the owner of the tables it alters"), "\(message)")
                #expect(message.contains("connects as \"\(role)\""), "\(message)")
                #expect(message.contains("\"Patient\" is owned by \"\(ownerName)\""), "\(message)")
            }
        }
    }

    /// A role's or database's default `statement_timeout` cancels an index build (it runs outside a transaction, so the
    /// migration's own `statement_timeout = 0` does not reach it): the error names the setting and the way out, and the
    /// next run, with the default lifted, drops the half-built index and builds it.
    @Test func aDefaultStatementTimeout_cancellingAnIndexBuild_isNamedWithTheWayOut() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let setup = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(setup)
            var first = Migrator()
            first.migrations = Array(Migrations.all.prefix(1))
            _ = try first.migrate(setup)
            let database = try setup.query("SELECT current_database() AS d").first?["d"].string() ?? ""
            try setup.query("ALTER DATABASE \(unescaped: PostgresConnection.quoteIdentifier(database)) SET statement_timeout = '500ms'")
            // A transaction with an older snapshot holds the build in its wait for older snapshots past the timeout.
            let reader = try PostgresConnection(conninfo: conninfo)
            try reader.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
            try reader.query(#"SELECT count(*) FROM "Patient""#)
            let connection = try PostgresConnection(conninfo: conninfo)
            let error = #expect(throws: PostgresError.self) { try Migrator.migrate(connection) }
            let message = error?.description ?? ""
            #expect(message.contains("was cancelled by statement_timeout (500ms"), "\(message)")
            #expect(message.contains("PGOPTIONS='-c statement_timeout=0'"), "\(message)")
            try reader.query("COMMIT")
            try setup.query("ALTER DATABASE \(unescaped: PostgresConnection.quoteIdentifier(database)) RESET statement_timeout")
            let again = try Migrator.migrate(try PostgresConnection(conninfo: conninfo))
            #expect(again.applied.last == Migrations.all.last?.version)
            let invalid = try setup.query("SELECT count(*)::int AS n FROM pg_index WHERE NOT indisvalid").first?["n"].int()
            #expect(invalid == 0)
        }
    }

    /// DDL that waits for the API's locks, attempt after attempt, for longer than the `migrate` lease: the lease is
    /// renewed before each attempt, so a second `migrate` waits instead of running beside it. Before, it was renewed only
    /// before index builds, and the lease lapsed after `leaseDuration`.
    @Test func lockRetriesLongerThanTheLease_keepTheLease() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let setup = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(setup)
            var upToThree = Migrator()
            upToThree.migrations = Migrations.all.filter { $0.version <= 3 }
            _ = try upToThree.migrate(setup)
            // Migration 4 alters "CaregiverEntitlement": an open transaction of the API's holds it.
            let api = try PostgresConnection(conninfo: conninfo)
            try api.query("BEGIN")
            try api.query(#"LOCK TABLE "CaregiverEntitlement" IN ACCESS SHARE MODE"#)
            var migrator = Migrator()
            migrator.lockTimeout = .milliseconds(200)
            migrator.leaseDuration = .seconds(2)
            let client = PostgresClient(conninfo: conninfo, maxConnections: 1)
            let run = Task { try await migrator.migrate(client) }
            let other = try PostgresConnection(conninfo: conninfo)
            // The first migrate holds the lease and waits for the lock.
            var waiting = false
            for _ in 0..<200 where !waiting {
                let rows = try other.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
                waiting = try rows.first?["n"].int() ?? 0 > 0
                if !waiting { try await Task.sleep(for: .milliseconds(50)) }
            }
            try #require(waiting, "migration 4 never waited for the API's lock")
            let competitor = SingletonLease(name: "migrate", duration: .seconds(2))
            var taken = 0
            let until = ContinuousClock.now + .milliseconds(3500)
            while ContinuousClock.now < until {
                if try competitor.acquire(other) { taken += 1 }
                try await Task.sleep(for: .milliseconds(100))
            }
            try api.query("COMMIT")
            let report = try await run.value
            #expect(taken == 0, "a second migrate took the lease \(taken) time(s) while the first waited for a lock")
            #expect(report.lockRetries > 0)
            #expect(report.applied.first == 4)
        }
    }

    /// `renew` extends a lease only while no other holder has taken it since, even one that gave it up again (which
    /// `acquire` would take back: `migrate` would then go on beside the other run's work). A lease that lapsed with no
    /// one taking it is still renewed.
    @Test func leaseRenew_failsOnceAnotherHolderTookIt_evenAfterItsRelease() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.query(SingletonLease.createTableSQL)
            let first = SingletonLease(name: "job", duration: .milliseconds(300))
            let second = SingletonLease(name: "job", duration: .milliseconds(300))
            #expect(try first.acquire(connection))
            #expect(try !second.acquire(connection))
            try await Task.sleep(for: .milliseconds(400))
            #expect(try first.renew(connection), "a lapsed lease no one took is still this holder's")
            try await Task.sleep(for: .milliseconds(400))
            #expect(try second.acquire(connection))
            try second.release(connection)
            #expect(try !first.renew(connection), "another holder took the lease in between")
            #expect(try first.acquire(connection), "acquire takes a released lease back (what renew must not do)")
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

/// Inserts one `"PushDelivery"` row after another on its own thread and keeps the longest gap between two commits.
final class InsertWriter: Sendable {
    private struct State {
        var running = true
        var count = 0
        var longest = Duration.zero
        var failure: String?
    }

    private let conninfo: String
    private let state = Mutex(State())
    private let done = DispatchSemaphore(value: 0)

    init(conninfo: String) { self.conninfo = conninfo }

    var inserted: Int { state.withLock { $0.count } }

    func start() {
        Thread.detachNewThread { [self] in
            defer { done.signal() }
            let clock = ContinuousClock()
            do {
                let connection = try PostgresConnection(conninfo: conninfo)
                var last = clock.now
                var n = 0
                while state.withLock({ $0.running }) {
                    n += 1
                    try connection.query(#"INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId") VALUES (\#("new-\(n)"), \#("new-\(n)"), 'd1')"#)
                    let now = clock.now
                    state.withLock {
                        $0.count += 1
                        $0.longest = max($0.longest, now - last)
                    }
                    last = now
                }
            } catch {
                state.withLock { $0.failure = "\(error)" }
            }
        }
    }

    func stop() -> (longestStall: Duration, error: String?) {
        state.withLock { $0.running = false }
        done.wait()
        return state.withLock { ($0.longest, $0.failure) }
    }
}
