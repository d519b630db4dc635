import Foundation
import Postgres
import Schema

/// Isolated databases for integration tests. The admin connection comes from
/// `TEST_DATABASE_URL` (scripts/test sets it); each test gets a fresh database, dropped on
/// every exit path.
public enum TestDatabase {
    /// Advisory locks held in the current database, as column `n`: the tests beside this one share the server, and
    /// their migrations take advisory locks in their own databases.
    public static let advisoryLocksHere: PostgresQuery = """
        SELECT count(*) AS n FROM pg_locks
        WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        """

    /// The admin conninfo, or a failure that says how to provide it.
    public static func adminConninfo() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["TEST_DATABASE_URL"], !url.isEmpty else {
            throw TestSupportError("TEST_DATABASE_URL is not set: run the suite through scripts/test")
        }
        return url
    }

    /// The same database as `conninfo`, reached through the transaction-mode PgBouncer that scripts/test
    /// starts (`TEST_POOLER_URL`: host, port, user and password; the database name is appended). `tracked: false`:
    /// through the one that keeps no prepared statements for its clients (`TEST_UNTRACKED_POOLER_URL`).
    public static func poolerConninfo(_ conninfo: String, tracked: Bool = true) throws -> String {
        let variable = tracked ? "TEST_POOLER_URL" : "TEST_UNTRACKED_POOLER_URL"
        guard let pooler = ProcessInfo.processInfo.environment[variable], !pooler.isEmpty else {
            throw TestSupportError("\(variable) is not set: run the suite through scripts/test (it starts PgBouncer)")
        }
        guard let name = conninfo.split(separator: " ").last(where: { $0.hasPrefix("dbname=") }) else {
            throw TestSupportError("no dbname= in \(conninfo)")
        }
        return pooler + " " + name
    }

    /// Whether `TEST_POOLER_URL`'s PgBouncer keeps protocol-level prepared statements for its clients (1.21+ does by
    /// default: `TEST_POOLER_PREPARED_STATEMENTS`, its max_prepared_statements, is above 0).
    public static var poolerTracksPreparedStatements: Bool {
        (Int(ProcessInfo.processInfo.environment["TEST_POOLER_PREPARED_STATEMENTS"] ?? "") ?? 0) > 0
    }

    /// Runs `body` with the conninfo of a new, empty database (for the tests of migrations themselves).
    public static func withEmptyDatabase<T>(_ body: (String) async throws -> T) async throws -> T {
        try await withDatabase(template: nil, body)
    }

    /// Runs `body` with a new database holding the API's tables (SPEC §2.1) and the worker's migrations: a copy of
    /// one migrated template database (`CREATE DATABASE … TEMPLATE`), made once per set of migrations.
    public static func withMigratedDatabase<T>(_ body: (String) async throws -> T) async throws -> T {
        try await withDatabase(template: try await MigratedTemplate.shared.name(), body)
    }

    /// Creates the database (a copy of `template` when given), runs `body` off the cooperative pool (tests' libpq calls
    /// block), drops the database on every exit path.
    private static func withDatabase<T>(template: String?, _ body: (String) async throws -> T) async throws -> T {
        try await offCooperativePool {
            let admin = try adminConninfo()
            let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
            try runAdmin(admin, "CREATE DATABASE \(name)" + (template.map { " TEMPLATE \($0)" } ?? ""))
            let conninfo = admin + " dbname=\(name)"
            do {
                let value = try await body(conninfo)
                try? runAdmin(admin, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
                return value
            } catch {
                try? runAdmin(admin, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
                throw error
            }
        }
    }

    /// Creates the web API's tables as its Prisma schema does (SPEC §2.1).
    public static func createAPITables(_ connection: PostgresConnection) throws {
        guard apiTables.count >= 8 else { throw TestSupportError("sql/dev-api-schema.sql not found or incomplete") }
        for statement in apiTables { try connection.query("\(unescaped: statement)") }
    }

    /// `sql/dev-api-schema.sql`, split into statements (the demo and benchmark use the same file).
    static let apiTables: [String] = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = (try? String(contentsOf: root.appendingPathComponent("sql/dev-api-schema.sql"), encoding: .utf8)) ?? ""
        let withoutComments = text.split(separator: "\n").filter { !$0.hasPrefix("--") }.joined(separator: "\n")
        return withoutComments.split(separator: ";").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
    }()

    static func runAdmin(_ admin: String, _ sql: String) throws {
        let connection = try PostgresConnection(conninfo: admin)
        try connection.query("\(unescaped: sql)")  // CREATE/DROP DATABASE of a name made here: identifiers cannot be bound
    }
}

/// A failure inside the test helpers.
public struct TestSupportError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
