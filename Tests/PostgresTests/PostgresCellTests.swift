import Foundation
@testable import Postgres
import Testing

@Suite("Postgres cell decoding")
struct PostgresCellTests {
    static let instant = Date(timeIntervalSince1970: 1_770_764_607)  // 2026-02-10T23:03:27Z

    /// PostgreSQL's `timestamptz` text in ISO DateStyle, with every offset form it prints.
    @Test func date_readsISODateStyle_anyOffset() throws {
        #expect(try PostgresCell(column: "t", text: "2026-02-10 23:03:27+00").date() == Self.instant)
        #expect(try PostgresCell(column: "t", text: "2026-02-11 04:33:27.5+05:30").date() == Self.instant.addingTimeInterval(0.5))
        #expect(try PostgresCell(column: "t", text: "2026-02-10 20:03:27-03:00:00").date() == Self.instant)
        let micro = try PostgresCell(column: "t", text: "2026-02-10 23:03:27.123456+00").date()
        #expect(abs(micro.timeIntervalSince1970 - 1_770_764_607.123456) < 0.000_001)
        #expect(throws: PostgresError.self) { try PostgresCell(column: "t", text: "2026-02-10 23:03:27").date() }
        #expect(throws: PostgresError.self) { try PostgresCell(column: "t", text: nil).date() }
    }
}
