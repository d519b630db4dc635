import Foundation
import Postgres
import Schema

/// The template that `TestDatabase.withMigratedDatabase` copies (River's testdb): the API's tables and every migration,
/// built once for each version of them. Its name carries a fingerprint of `sql/dev-api-schema.sql` and the migrations,
/// so a changed migration builds a new template. Built under an advisory lock (test processes sharing a cluster), in a
/// database of another name renamed when complete, then closed to connections: `CREATE DATABASE … TEMPLATE` fails while
/// anyone is connected to the template.
actor MigratedTemplate {
    static let shared = MigratedTemplate()

    private var building: Task<String, any Error>?

    /// The template's name, built on the first call; concurrent callers wait for the same build.
    func name() async throws -> String {
        if let building { return try await building.value }
        let task = Task.detached { try await offCooperativePool { try Self.build() } }
        building = task
        do {
            return try await task.value
        } catch {
            building = nil  // the next test tries again, and reports its own failure
            throw error
        }
    }

    /// `pg_advisory_lock` key (advisory locks are per database: this one is taken in the admin database).
    private static let lockKey = 47_001

    private static func build() throws -> String {
        let admin = try TestDatabase.adminConninfo()
        let name = "mw_template_" + fingerprint
        let connection = try PostgresConnection(conninfo: admin)
        try connection.query("SELECT pg_advisory_lock(\(.int(lockKey)))")
        defer { _ = try? connection.query("SELECT pg_advisory_unlock(\(.int(lockKey)))") }
        guard try connection.query("SELECT 1 FROM pg_database WHERE datname = \(.text(name))").isEmpty else { return name }
        let partial = name + "_building"
        try connection.query("\(unescaped: "DROP DATABASE IF EXISTS \(partial) WITH (FORCE)")")
        try connection.query("\(unescaped: "CREATE DATABASE \(partial)")")
        try migrate(admin + " dbname=\(partial)")
        try connection.query("\(unescaped: "ALTER DATABASE \(partial) RENAME TO \(name)")")
        try connection.query("\(unescaped: "ALTER DATABASE \(name) WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")")
        return name
    }

    /// The API's tables and the migrations; the connection is closed on return.
    private static func migrate(_ conninfo: String) throws {
        let connection = try PostgresConnection(conninfo: conninfo)
        try TestDatabase.createAPITables(connection)
        _ = try Migrator.migrate(connection)
    }

    /// FNV-1a (64 bits) of the API schema and every migration, in hex.
    static let fingerprint: String = {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func add(_ text: String) {
            for byte in text.utf8 + [0] {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01b3
            }
        }
        TestDatabase.apiTables.forEach(add)
        for migration in Migrations.all {
            add("\(migration.version) \(migration.name)")
            migration.statements.forEach { add($0.sql) }
            migration.concurrentIndexes.forEach { add("\($0.name) \($0.definition.sql)") }
        }
        return String(hash, radix: 16)
    }()
}
