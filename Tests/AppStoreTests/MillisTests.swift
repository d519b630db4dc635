@testable import AppStore
import Foundation
@testable import Postgres
import Testing

/// Apple's API takes milliseconds; a checkpoint PostgreSQL stored in milliseconds comes back as a binary fraction that
/// can sit a hair below its millisecond. Every millisecond of a second reads back as itself.
@Suite struct MillisTests {
    @Test func everyMillisecondReadBackFromPostgreSQL_isItself() throws {
        let second: Int64 = 1_795_910_401_000  // 2026-11-29 00:00:01 UTC: a second where rounding down lost one (…857)
        var wrong: [Int64] = []
        for offset in Int64(0)..<1000 {
            let text = "2026-11-29 00:00:01.\(String(repeating: "0", count: 3 - String(offset).count))\(offset)+00"
            let read = AppStoreClient.millis(try PostgresCell(column: "checkpoint", text: text).date())
            if read != second + offset { wrong.append(offset) }
        }
        #expect(wrong.isEmpty, "milliseconds read back as another: \(wrong.prefix(10))")
    }
}
