import Postgres

/// Applies `Migrations.all` to a database: idempotent, and safe when several instances run
/// it at once (a session advisory lock serialises them; the loser finds nothing to do).
public struct Migrator: Sendable {
    /// Advisory lock key for migrations (any constant unique to this program).
    public static let lockKey: Int64 = 0x6D65_6477_6D69_6731  // "medwmig1"

    /// The bookkeeping table.
    public static let bookkeepingTable = "_medication_worker_migrations"

    public init() {}

    /// Result of one `migrate` run.
    public struct Report: Sendable, Equatable {
        /// Versions applied by this run (empty when already current).
        public var applied: [Int]
        /// The schema version after the run.
        public var currentVersion: Int
    }

    /// Migrates the database behind `client`.
    public func migrate(_ client: PostgresClient) async throws -> Report {
        try await client.withConnection { connection in try Migrator.migrate(connection) }
    }

    /// Migrates through one connection (blocking).
    public static func migrate(_ connection: PostgresConnection) throws -> Report {
        let missing = try missingAPITables(connection)
        guard missing.isEmpty else {
            throw PostgresError(.queryFailed, message: "the web API's tables are missing: "
                + missing.map { "\"\($0)\"" }.joined(separator: ", ")
                + " (run the API's Prisma migrations first; SPEC §2.1)")
        }
        try connection.query("SELECT pg_advisory_lock($1)", [.int(lockKey)])
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [.int(lockKey)]) }
        try connection.query("""
            CREATE TABLE IF NOT EXISTS "\(bookkeepingTable)" (
                version integer PRIMARY KEY,
                name text NOT NULL,
                "appliedAt" timestamptz NOT NULL DEFAULT now()
            )
            """)
        let done = Set(try connection.query("SELECT version FROM \"\(bookkeepingTable)\"").map { try $0["version"].int() })
        var applied: [Int] = []
        for migration in Migrations.all where !done.contains(migration.version) {
            try connection.withTransaction { transaction in
                for statement in migration.statements { try transaction.query(statement) }
                try transaction.query("INSERT INTO \"\(bookkeepingTable)\" (version, name) VALUES ($1, $2)",
                                      [.int(migration.version), .text(migration.name)])
            }
            applied.append(migration.version)
        }
        return Report(applied: applied, currentVersion: Migrations.all.map(\.version).max() ?? 0)
    }

    /// The schema version recorded in the database, or nil before the first `migrate`.
    public static func currentVersion(_ connection: PostgresConnection) throws -> Int? {
        let exists = try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [.text("\"\(bookkeepingTable)\"")])
        guard try exists.first?["present"].bool() == true else { return nil }
        return try connection.query("SELECT max(version) AS v FROM \"\(bookkeepingTable)\"").first?["v"].optionalInt()
    }

    /// API tables of SPEC §2.1 that do not exist in the connection's search path.
    public static func missingAPITables(_ connection: PostgresConnection) throws -> [String] {
        try Migrations.requiredAPITables.filter { table in
            let rows = try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [.text("\"\(table)\"")])
            return try rows.first?["present"].bool() != true
        }
    }
}
