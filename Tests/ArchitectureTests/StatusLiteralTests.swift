import Foundation
import Testing

/// A status reaches SQL only through its enum (`\(literal: DeliveryStatus.sent)`): no column value is written as a
/// literal outside the migrations (`Sources/Schema`), which are the schema's own record of them. Comments are skipped.
@Suite struct StatusLiteralTests {
    static let values = ["PENDING", "SENT", "FAILED", "DONE", "DEAD", "EXPIRED", "ACTIVE", "REVOKED", "CAREGIVER", "PATIENT", "DISABLE"]

    @Test func noStatusLiteralInSQL_outsideTheSchemaAndTheEnums() throws {
        let sources = ModuleFloorsTests.root.appendingPathComponent("Sources")
        var found: [String] = []
        for case let url as URL in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)!
        where url.pathExtension == "swift" && !url.path.contains("/Sources/Schema/") {
            let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            for (number, line) in lines.enumerated() where Self.hasStatusLiteral(line) {
                found.append("\(url.path.replacingOccurrences(of: sources.path + "/", with: "")):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
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
