import JSON
import Postgres
import Schema
import WorkerConfig

/// `migrate`: applies the worker's migrations (idempotent), as the owner of the tables.
struct MigrateCommand: OperatorCommand {
    static let name = "migrate"
    static let summary = "Apply the worker's database migrations (idempotent; run as the tables' owner)."
    static let help = """
        Usage: medication-worker migrate [--json]

        Applies the worker's versioned, additive migrations to DATABASE_URL (the tables' owner: it creates
        tables, indexes and the notify trigger). Safe to run again: applied versions are skipped.
        Then apply sql/roles.sql for the least-privilege role the daemon and the other commands run as.

        Options:
          --json    One JSON document: {"applied": [versions], "schemaVersion": N}.
        """

    init(arguments: inout CommandArguments) throws(UsageError) {}

    struct Report: CommandReport {
        var applied: [Int]
        var schemaVersion: Int

        var text: String {
            applied.isEmpty ? "schema is current (version \(schemaVersion)); nothing to do"
                : "applied migrations \(applied.map(String.init).joined(separator: ", ")); schema version \(schemaVersion)"
        }

        var json: JSONValue {
            .object(["applied": .array(applied.map { .number(Double($0)) }), "schemaVersion": .number(Double(schemaVersion))])
        }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        try await context.withDatabase { client, _ in
            do {
                let report = try await Migrator().migrate(client)
                return Report(applied: report.applied, schemaVersion: report.currentVersion)
            } catch let error as PostgresError where error.sqlState == "42501" {
                // The role lacks the owner's privileges: a setting to fix (exit 78), which the migrate unit does not
                // retry every 10 s.
                throw ConfigurationError("DATABASE_URL", error.message)
            }
        }
    }
}
