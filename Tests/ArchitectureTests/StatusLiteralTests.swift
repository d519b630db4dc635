import Foundation
import Testing

/// A status reaches SQL only through its enum (`\(literal: DeliveryStatus.sent)`): no column value is written as a
/// literal outside the migrations (`Sources/Schema`), which are the schema's own record of them, in the sources or in
/// the tests. Comments are skipped.
@Suite struct StatusLiteralTests {
    static let values = ["PENDING", "SENT", "FAILED", "DONE", "DEAD", "EXPIRED", "ACTIVE", "REVOKED", "CAREGIVER", "PATIENT", "DISABLE"]

    /// The test files that keep their literals: there the literal is the text under test (this file's detector cases,
    /// and `PostgresQuery`'s test of SQL written as plain text).
    static let testsKeepingLiterals: Set = [
        "ArchitectureTests/StatusLiteralTests.swift",
        "PostgresTests/PostgresQueryTests.swift",
    ]

    @Test func noStatusLiteralInSQL_outsideTheSchemaAndTheEnums() throws {
        let found = try Self.statusLiterals(in: "Sources") { $0.hasPrefix("Schema/") }
            + Self.statusLiterals(in: "Tests") { Self.testsKeepingLiterals.contains($0) }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
        let kept = try Self.statusLiterals(in: "Tests") { !Self.testsKeepingLiterals.contains($0) }
        let stale = Self.testsKeepingLiterals.filter { file in !kept.contains { $0.hasPrefix("Tests/\(file):") } }
        #expect(stale.isEmpty, "no literal left, off the list: \(stale.sorted().joined(separator: ", "))")
    }

    /// Each line of the Swift files under `directory` with a status literal, as `directory/path:line: code`, but for the
    /// files whose path (below `directory`) is `skipped`.
    static func statusLiterals(in directory: String, skipping skipped: (String) -> Bool) throws -> [String] {
        let root = ModuleFloorsTests.root.appendingPathComponent(directory)
        var found: [String] = []
        for case let url as URL in FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)!
        where url.pathExtension == "swift" {
            let path = url.path.replacingOccurrences(of: root.path + "/", with: "")
            if skipped(path) { continue }
            let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            for (number, line) in lines.enumerated() where Self.hasStatusLiteral(line) {
                found.append("\(directory)/\(path):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        return found.sorted()
    }

    @Test func detector_findsALiteralAndSkipsCommentsAndEnums() {
        #expect(Self.hasStatusLiteral(#"WHERE status = 'PENDING' AND x"#))
        #expect(Self.hasStatusLiteral(#"    SET status = 'FAILED'"#))
        #expect(!Self.hasStatusLiteral(#"    /// (`WHERE status = 'PENDING'`)"#))
        #expect(!Self.hasStatusLiteral(#"    -- a 'SENT' row"#))
        #expect(!Self.hasStatusLiteral(#"WHERE status = \(literal: OutboxStatus.pending)"#))
        #expect(!Self.hasStatusLiteral(#"    case pending = "PENDING""#))
    }

    /// A line (not a comment) with one of the values between single quotes.
    static func hasStatusLiteral(_ line: Substring) -> Bool {
        let code = line.trimmingCharacters(in: .whitespaces)
        if code.hasPrefix("//") || code.hasPrefix("--") { return false }
        return values.contains { code.contains("'\($0)'") }
    }
}
