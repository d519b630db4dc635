import Foundation
import Postgres

/// `sql/roles.sql` applied to a test database under a role of the test's own (roles are cluster-wide, and suites run in
/// parallel): the least-privilege role exactly as an operator creates it, renamed.
public enum LeastPrivilegeRole {
    /// `sql/roles.sql` as shipped.
    public static var rolesSQL: String {
        get throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            return try String(contentsOf: root.appendingPathComponent("sql/roles.sql"), encoding: .utf8)
        }
    }

    /// Runs `body` with the conninfo of `owner`'s database as a fresh role granted what `sql/roles.sql` grants; the role
    /// is dropped on every exit path.
    public static func with<T>(owner: String, _ body: (String) async throws -> T) async throws -> T {
        let role = "lp_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let script = try rolesSQL
            .replacingOccurrences(of: "_medication_worker", with: "\u{1}")  // the worker's own tables keep their names
            .replacingOccurrences(of: "medication_worker", with: String(role))
            .replacingOccurrences(of: "\u{1}", with: "_medication_worker")
        let admin = try PostgresConnection(conninfo: owner)
        _ = try admin.executeScript("\(unescaped: script)")
        defer {
            _ = try? admin.query("DROP OWNED BY \(unescaped: role)")
            _ = try? admin.query("DROP ROLE IF EXISTS \(unescaped: role)")
        }
        return try await body(owner + " user=\(role)")
    }
}
