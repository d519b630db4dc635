import FoundationEssentials
import Postgres
import Timekeeping

/// Applies `Migrations.all` to a database: idempotent, online, and safe when several instances
/// run it at once.
///
/// - One `migrate` at a time through the `migrate` lease row (pooler-safe, unlike a session
///   advisory lock); a second one waits for it and then finds nothing to do.
/// - DDL inside transactions runs with a short `lock_timeout` and is retried: a migration waits
///   for the API's transactions rather than making the API's inserts queue behind its lock.
/// - Index builds on the API's tables run `CONCURRENTLY`, outside a transaction; an index an
///   interrupted build left invalid is dropped and built again.
public struct Migrator: Sendable {
    /// The bookkeeping table.
    public static let bookkeepingTable = "_medication_worker_migrations"

    /// How long one DDL transaction may wait for a lock before it is rolled back and retried.
    public var lockTimeout: Duration = .seconds(2)
    /// How many times DDL that timed out on a lock is tried again before `migrate` fails.
    public var lockAttempts = 60
    /// What it applies: `Migrations.all` (tests apply a prefix, as an earlier version of the daemon would).
    public var migrations = Migrations.all
    /// How long the `migrate` lease lasts without renewal: a `migrate` that died frees it after this. It is renewed
    /// before every DDL attempt and every index build.
    public var leaseDuration: Duration = .seconds(120)

    public init() {}

    /// The bookkeeping table's name as SQL (a constant, never a value).
    static let bookkeepingSQL: PostgresQuery = "\(unescaped: PostgresConnection.quoteIdentifier(bookkeepingTable))"

    /// Creates the bookkeeping table when missing.
    static let createBookkeepingSQL: PostgresQuery = """
        CREATE TABLE IF NOT EXISTS \(sql: bookkeepingSQL) (
            version integer PRIMARY KEY,
            name text NOT NULL,
            "appliedAt" timestamptz NOT NULL DEFAULT now()
        )
        """

    /// The versions recorded (`version`).
    static let appliedVersionsQuery: PostgresQuery = "SELECT version FROM \(sql: bookkeepingSQL)"

    /// The newest version recorded (`v`, NULL when none).
    static let currentVersionQuery: PostgresQuery = "SELECT max(version) AS v FROM \(sql: bookkeepingSQL)"

    /// Records migration `version` as applied.
    static func recordQuery(version: Int, name: String) -> PostgresQuery {
        "INSERT INTO \(sql: bookkeepingSQL) (version, name) VALUES (\(version), \(name)) ON CONFLICT (version) DO NOTHING"
    }

    /// The tables the migrations alter (the API's, and the worker's own once created) that the session's role may not:
    /// each `table` with its `owner`, and the session's role as `me`. ALTER TABLE and CREATE INDEX need the owner's
    /// privileges (superuser, the owner, or a role that inherits them).
    static var notOwnedTablesQuery: PostgresQuery {
        let names = (Migrations.requiredAPITables + Migrations.workerTables).map { "\"\($0)\"" }
        return """
            SELECT c.relname AS table, pg_get_userbyid(c.relowner) AS owner, current_user AS me
            FROM unnest(\(names)::text[]) WITH ORDINALITY AS t(name, n) JOIN pg_class c ON c.oid = to_regclass(t.name)
            WHERE NOT pg_has_role(current_user, c.relowner, 'USAGE') ORDER BY t.n
            """
    }

    /// Whether the relation named `relation` (quoted as SQL writes it) exists in the search path (`present`).
    static func existsQuery(relation: String) -> PostgresQuery {
        "SELECT to_regclass(\(relation)) IS NOT NULL AS present"
    }

    /// Index `quoted`'s state: `valid`, and whether a session is `building` it now (no row: no such index).
    static func indexStateQuery(quoted: String) -> PostgresQuery {
        """
        SELECT i.indisvalid AS valid,
               EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid) AS building
        FROM pg_index i WHERE i.indexrelid = to_regclass(\(quoted))
        """
    }

    /// Result of one `migrate` run.
    public struct Report: Sendable, Equatable {
        /// Versions applied by this run (empty when already current).
        public var applied: [Int]
        /// The schema version after the run.
        public var currentVersion: Int
        /// DDL transactions rolled back because a lock was not granted within `lockTimeout`.
        public var lockRetries = 0
    }

    /// Migrates the database behind `client`.
    public func migrate(_ client: PostgresClient) async throws -> Report {
        let migrator = self
        return try await client.withConnection { connection in try migrator.migrate(connection) }
    }

    /// Migrates through one connection (blocking).
    public static func migrate(_ connection: PostgresConnection) throws -> Report {
        try Migrator().migrate(connection)
    }

    /// Migrates through one connection (blocking).
    public func migrate(_ connection: PostgresConnection) throws -> Report {
        let missing = try Self.missingAPITables(connection)
        guard missing.isEmpty else {
            throw PostgresError(.queryFailed, message: "the web API's tables are missing: "
                + missing.map { "\"\($0)\"" }.joined(separator: ", ")
                + " (run the API's Prisma migrations first; docs/database.md)")
        }
        if let row = try connection.query(Self.notOwnedTablesQuery).first {
            let table = try row["table"].string(), owner = try row["owner"].string(), me = try row["me"].string()
            throw PostgresError(.queryFailed, message: "migrate must run as the owner of the tables it alters: DATABASE_URL "
                + "connects as \"\(me)\", and \"\(table)\" is owned by \"\(owner)\" (the role that ran the API's Prisma "
                + "migrations; the daemon's least-privilege role cannot alter them; docs/database.md)", sqlState: "42501")
        }
        try Self.createIfMissing(connection, Self.createBookkeepingSQL)
        try Self.createIfMissing(connection, SingletonLease.createTableSQL)

        let lease = SingletonLease(name: "migrate", duration: leaseDuration)
        try waitForLease(lease, connection)
        defer { _ = try? lease.release(connection) }
        // Renewed before each step that may wait (a DDL attempt, an index build). Should one step outlast the lease
        // (an index build on a large table past `leaseDuration`), another `migrate` may have taken it: this one stops
        // rather than apply migrations beside it.
        let renew = { () throws -> Void in
            guard try lease.renew(connection) else {
                throw PostgresError(.queryFailed, message: "the migrate lease (table \(SingletonLease.table)) passed to another "
                    + "`migrate` while a step of this one outlasted it (\(Int(leaseDuration.asSeconds)) s); stopped so that "
                    + "two do not apply migrations at once. The other goes on; run `migrate` again to check")
            }
        }

        let done = Set(try connection.query(Self.appliedVersionsQuery).map { try $0["version"].int() })
        var report = Report(applied: [], currentVersion: migrations.map(\.version).max() ?? 0)
        let settings = TransactionSettings(values: [("lock_timeout", "\(Int(lockTimeout.asSeconds * 1000))ms"), ("statement_timeout", "0")])
        for migration in migrations where !done.contains(migration.version) {
            if !migration.statements.isEmpty {
                report.lockRetries += try retryingLockTimeouts {
                    try renew()
                    try connection.withTransaction(settings: settings) { transaction in
                        for statement in migration.statements { try transaction.query(statement) }
                    }
                }
            }
            for index in migration.concurrentIndexes {
                try renew()
                try Self.buildConcurrently(index, connection)
            }
            try connection.query(Self.recordQuery(version: migration.version, name: migration.name))
            report.applied.append(migration.version)
        }
        return report
    }

    /// Waits (up to ten minutes) while another `migrate` holds the lease.
    private func waitForLease(_ lease: SingletonLease, _ connection: PostgresConnection) throws {
        let deadline = ContinuousClock.now + .seconds(600)
        while try !lease.acquire(connection) {
            guard ContinuousClock.now < deadline else {
                throw PostgresError(.queryFailed, message: "another `migrate` has held the migrate lease for ten minutes (table \(SingletonLease.table))")
            }
            sleepThread(for: .milliseconds(500))
        }
    }

    /// Runs `body`, again after a pause each time it fails with SQLSTATE 55P03 (lock_not_available);
    /// returns how many attempts timed out.
    private func retryingLockTimeouts(_ body: () throws -> Void) throws -> Int {
        var timedOut = 0
        while true {
            do {
                try body()
                return timedOut
            } catch let error as PostgresError where error.sqlState == "55P03" && timedOut + 1 < lockAttempts {
                timedOut += 1
                sleepThread(for: .milliseconds(min(5000, 250 * timedOut)))
            }
        }
    }

    /// `CREATE INDEX CONCURRENTLY IF NOT EXISTS`, after dropping an invalid leftover of an
    /// interrupted build (unless a build of it is running right now); fails if the index is not valid after.
    static func buildConcurrently(_ index: ConcurrentIndex, _ connection: PostgresConnection) throws {
        let quoted = PostgresConnection.quoteIdentifier(index.name)
        let stateQuery = indexStateQuery(quoted: quoted)
        var state = try connection.query(stateQuery).first
        while let row = state, try !row["valid"].bool(), try row["building"].bool() {
            sleepThread(for: .milliseconds(500))  // another session is building it: wait for its outcome
            state = try connection.query(stateQuery).first
        }
        if let row = state, try !row["valid"].bool() {
            try explainingStatementTimeout(of: quoted, connection) {
                try connection.executeScript("DROP INDEX CONCURRENTLY IF EXISTS \(unescaped: quoted)")
            }
            state = nil
        }
        if state == nil {
            try explainingStatementTimeout(of: quoted, connection) { try connection.executeScript(index.createSQL) }
        }
        guard try connection.query(stateQuery).first?["valid"].bool() == true else {
            throw PostgresError(.queryFailed, message: "index \(quoted) is not valid after CREATE INDEX CONCURRENTLY; run `migrate` again")
        }
    }

    /// Runs `body` (an index build or drop, outside a transaction, so under the session's `statement_timeout`: the role's
    /// or the database's default, as a pooler rules out setting it on the session); a cancel by that timeout is
    /// rethrown naming the setting and the way out. Any other cancel (57014 with the timeout off: `pg_cancel_backend`)
    /// is rethrown as the server said it.
    private static func explainingStatementTimeout(of quoted: String, _ connection: PostgresConnection,
                                                   _ body: () throws -> Void) throws {
        do {
            try body()
        } catch {
            guard let error = error as? PostgresError, error.sqlState == "57014",
                  let limit = try? connection.query("SHOW statement_timeout").first?["statement_timeout"].string(),
                  limit != "0" else { throw error }
            throw PostgresError(.queryFailed, message: "index \(quoted) was cancelled by statement_timeout (\(limit), this "
                + "role's or this database's default; the server said: \(error.message)). Run `migrate` over a direct "
                + "connection with PGOPTIONS='-c statement_timeout=0' (a pooler refuses that option), or lift the default "
                + "for the owner's role (a pooler's open server connections keep the old default until they reconnect); "
                + "the next run drops the half-built index and builds it again", sqlState: "57014")
        }
    }

    /// Runs a `CREATE … IF NOT EXISTS` that a concurrent `migrate` may win (`IF NOT EXISTS` does not stop two sessions
    /// creating the same object at once): the losing side fails with a unique violation on the catalog (23505),
    /// "relation already exists" (42P07) or, for a table's row type created a moment earlier, "type already exists"
    /// (42710); all three mean the object is there.
    private static func createIfMissing(_ connection: PostgresConnection, _ sql: PostgresQuery) throws {
        let outcome = Result { () throws(PostgresError) in try connection.query(sql) }
        if case .failure(let error) = outcome, !["23505", "42P07", "42710"].contains(error.sqlState ?? "") { throw error }
    }

    /// Versions of `Migrations.all` the database has not recorded (all of them before the first `migrate`).
    public static func missingVersions(_ connection: PostgresConnection) throws -> [Int] {
        let exists = try connection.query(existsQuery(relation: "\"\(bookkeepingTable)\""))
        guard try exists.first?["present"].bool() == true else { return Migrations.all.map(\.version) }
        let done = Set(try connection.query(appliedVersionsQuery).map { try $0["version"].int() })
        return Migrations.all.map(\.version).filter { !done.contains($0) }
    }

    /// The schema version recorded in the database, or nil before the first `migrate`.
    public static func currentVersion(_ connection: PostgresConnection) throws -> Int? {
        let exists = try connection.query(existsQuery(relation: "\"\(bookkeepingTable)\""))
        guard try exists.first?["present"].bool() == true else { return nil }
        return try connection.query(currentVersionQuery).first?["v"].optionalInt()
    }

    /// API tables (`Migrations.requiredAPITables`) that do not exist in the connection's search path.
    public static func missingAPITables(_ connection: PostgresConnection) throws -> [String] {
        try Migrations.requiredAPITables.filter { table in
            let rows = try connection.query(existsQuery(relation: "\"\(table)\""))
            return try rows.first?["present"].bool() != true
        }
    }
}
