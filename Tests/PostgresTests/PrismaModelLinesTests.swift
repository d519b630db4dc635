import Foundation
import Postgres
import Schema
import Testing
import TestSupport

/// docs/database.md's Prisma model lines are what the API's schema adopts; a column, index or default the worker's
/// migrations create and those lines leave out is one `prisma migrate dev` would drop (SPEC §2.2). This test migrates a
/// database holding only the API's tables, lists every column, default and index the migrations added, and finds each
/// in the lines.
@Suite("Prisma model lines", .blockingFixtures)
struct PrismaModelLinesTests {
    /// The ```prisma block of docs/database.md: each model's table (its `@@map`, else its name) → its lines.
    static func models() throws -> [String: [String]] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/database.md"), encoding: .utf8)
        guard let start = text.range(of: "```prisma\n"), let end = text.range(of: "\n```", range: start.upperBound..<text.endIndex) else {
            throw TestSupportError("docs/database.md has no ```prisma block")
        }
        var models: [String: [String]] = [:]
        var name: String?
        var lines: [String] = []
        for raw in text[start.upperBound..<end.lowerBound].split(separator: "\n") {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("model ") {
                name = String(line.dropFirst(6).prefix { !$0.isWhitespace && $0 != "{" })
                lines = []
            } else if line.hasPrefix("}"), let model = name {
                let mapped = lines.first { $0.hasPrefix("@@map(\"") }.map { String($0.dropFirst(7).prefix { $0 != "\"" }) }
                models[mapped ?? model] = lines
                name = nil
            } else if name != nil, !line.isEmpty, !line.hasPrefix("//") {
                lines.append(line)
            }
        }
        return models
    }

    struct Schema: Equatable {
        /// "table.column" → whether it has a default.
        var columns: [String: Bool] = [:]
        /// index name → table.
        var indexes: [String: String] = [:]
    }

    static func schema(_ connection: PostgresConnection) throws -> Schema {
        var schema = Schema()
        for row in try connection.query("""
            SELECT table_name AS t, column_name AS c, column_default IS NOT NULL AS has_default
            FROM information_schema.columns WHERE table_schema = 'public'
            """) {
            schema.columns["\(try row["t"].string()).\(try row["c"].string())"] = try row["has_default"].bool()
        }
        for row in try connection.query("SELECT indexname AS i, tablename AS t FROM pg_indexes WHERE schemaname = 'public'") {
            schema.indexes[try row["i"].string()] = try row["t"].string()
        }
        return schema
    }

    @Test func everyColumnIndexAndDefaultTheMigrationsCreate_isInTheModelLines() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try TestDatabase.createAPITables(connection)
            let before = try Self.schema(connection)
            _ = try Migrator.migrate(connection)
            let after = try Self.schema(connection)
            let models = try Self.models()
            var missing = Set<String>()
            for (column, hasDefault) in after.columns.sorted(by: { $0.key < $1.key }) where before.columns[column] == nil {
                let parts = column.split(separator: ".", maxSplits: 1).map(String.init)
                guard let lines = models[parts[0]] else {
                    missing.insert("model for table \(parts[0])")
                    continue
                }
                guard let line = lines.first(where: { $0.split(separator: " ").first.map(String.init) == parts[1] }) else {
                    missing.insert("column \(column)")
                    continue
                }
                if hasDefault && !line.contains("@default(") { missing.insert("default of \(column)") }
            }
            let text = models.values.flatMap { $0 }.joined(separator: "\n")
            for (index, table) in after.indexes.sorted(by: { $0.key < $1.key }) where before.indexes[index] == nil {
                // A new table's primary key is its @id / @@id.
                if index.hasSuffix("_pkey") {
                    if !(models[table] ?? []).contains(where: { $0.contains("@id") }) { missing.insert("primary key of \(table)") }
                    continue
                }
                if !text.contains("map: \"\(index)\"") { missing.insert("index \(index) on \(table)") }
            }
            // Defaults the migrations changed on the API's columns (PushDelivery.status: SENT for the inline sender's rows).
            let status = try connection.query("""
                SELECT column_default AS d FROM information_schema.columns WHERE table_name = 'PushDelivery' AND column_name = 'status'
                """)[0]["d"].string()
            let statusLine = models["PushDelivery"]?.first { $0.hasPrefix("status ") } ?? ""
            if !statusLine.contains("@default(\"\(status.split(separator: "'").first ?? "")\")") { missing.insert("PushDelivery.status's default \(status)") }
            #expect(missing.isEmpty, "docs/database.md's Prisma model lines leave out: \(missing.sorted().joined(separator: "; "))")
        }
    }
}
