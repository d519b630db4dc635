import Foundation
import Testing
import Timekeeping

@Suite("Timestamp reader")
struct TimestampReaderTests {
    static let instant = Date(timeIntervalSince1970: 1_770_764_607)  // 2026-02-10T23:03:27Z

    @Test func rfc3339_withEveryOffsetForm() {
        #expect(TimestampReader.rfc3339("2026-02-11T08:03:27+09:00") == Self.instant)
        #expect(TimestampReader.rfc3339("2026-02-10T23:03:27Z") == Self.instant)
        #expect(TimestampReader.rfc3339("2026-02-10t23:03:27z") == Self.instant)
        #expect(TimestampReader.rfc3339("2026-02-10T20:03:27.250-03:00") == Self.instant.addingTimeInterval(0.25))
        #expect(TimestampReader.rfc3339("2026-02-10T23:03:60Z") == Self.instant.addingTimeInterval(32))  // leap second as :59
    }

    @Test(arguments: ["2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-02-10 23:03:27Z", "2026-02-10T24:00:00Z",
                      "2026-02-10T23:03:27", "2026-02-10T23:03:27.Z", "2026-02-10T23:03:27+0900", "2026-02-10T23:03:27+09:00x",
                      "2025-02-29T00:00:00Z", ""])
    func rfc3339_refusesWhatIsNotOne(_ text: String) {
        #expect(TimestampReader.rfc3339(text) == nil)
    }

    @Test func httpDate_imfFixdate() {
        #expect(TimestampReader.httpDate("Tue, 10 Feb 2026 23:03:27 GMT") == Self.instant)
        #expect(TimestampReader.httpDate("Tuesday, 10-Feb-26 23:03:27 GMT") == nil)
        #expect(TimestampReader.httpDate("Tue, 10 Feb 2026 23:03:27 UTC") == nil)
    }

    @Test func calendarDates() {
        #expect(TimestampReader.isCalendarDate("2024-02-29"))
        #expect(!TimestampReader.isCalendarDate("2100-02-29"))
        #expect(!TimestampReader.isCalendarDate("2026-4-01"))
    }
}
