import Outbox
import Postgres
import TestSupport
import Testing

/// `EventFate.settled` as the completion statement writes it (`settledStatusSQL`), evaluated by PostgreSQL: every
/// combination of its inputs gives what the Swift rule gives (the rule's own table is `EventFateTests.settled_inSwift`).
@Suite("Event fate in SQL", .blockingFixtures)
struct EventFateSQLTests {
    @Test func settled_inSQL_agreesWithSwift() async throws {
        let inputs = [false, true].flatMap { pending in (0...4).flatMap { attempts in [1, 3].map { (pending, attempts, $0) } } }
        try await TestDatabase.withMigratedDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            let values = inputs.map { "(\($0.0), \($0.1), \($0.2))" }.joined(separator: ", ")
            let expression = EventFate.settledStatusSQL(pending: "v.pending", attempts: "v.attempts", maxAttempts: "v.max_attempts")
            let rows = try connection.query("SELECT \(unescaped: expression) AS status FROM (VALUES \(unescaped: values)) AS v(pending, attempts, max_attempts)")
            let swift = inputs.map { EventFate.settled(deliveriesPending: $0.0, attempts: $0.1, maxAttempts: $0.2) }
            #expect(try rows.map { try $0["status"].decode(OutboxStatus.self) } == swift)
        }
    }
}
