import FoundationEssentials

/// The strict timestamp reader for text from outside, over bytes. `Date.ISO8601FormatStyle` accepts what must stay
/// refused here (February 30, `24:00:00`, `+0900`, text after the offset) and has no HTTP-date style in Swift 6.3
/// (docs/benchmark.md, "JSON and timestamps read by Foundation"). Two shapes, one digit reader and one calendar:
/// - RFC 3339 event times from the API (`YYYY-MM-DDTHH:MM:SS[.f…](Z|±HH:MM)`), strict;
/// - HTTP dates (RFC 9110 IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`).
public enum TimestampReader {
    /// `YYYY-MM-DD` naming a real day of the proleptic Gregorian calendar.
    public static func isCalendarDate(_ text: some StringProtocol) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 10 else { return false }
        return calendarDate(bytes) != nil
    }

    /// An RFC 3339 date-time with an explicit offset (`Z` or `±HH:MM`) and optional fractional seconds; a leap second
    /// (`:60`) reads as `:59`.
    public static func rfc3339(_ text: some StringProtocol) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 40,
              bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              let (days, secondOfDay) = dateAndTime(bytes), secondOfDay.second < 61 else { return nil }
        var index = 19
        guard let fraction = fraction(bytes, &index), index < bytes.count else { return nil }
        var offset = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard index + 6 == bytes.count, bytes[index + 3] == UInt8(ascii: ":"),
                  let hours = number(bytes, index + 1, 2), let minutes = number(bytes, index + 4, 2), hours < 24, minutes < 60 else { return nil }
            offset = (hours * 3600 + minutes * 60) * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
            index += 6
        default:
            return nil
        }
        guard index == bytes.count else { return nil }
        let seconds = days * 86_400 + secondOfDay.hour * 3600 + secondOfDay.minute * 60 + min(secondOfDay.second, 59) - offset
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    /// An HTTP date in IMF-fixdate form (the only one RFC 9110 lets a sender use), years 1970–9999.
    public static func httpDate(_ text: some StringProtocol) -> Date? {
        let parts = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT",
              let day = Int(parts[1]), let monthIndex = months.firstIndex(of: String(parts[2])), let year = Int(parts[3]),
              (1...31).contains(day), (1970...9999).contains(year) else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second) else { return nil }
        let days = CivilDate.daysSinceEpoch(year: year, month: monthIndex + 1, day: day)
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3600 + minute * 60 + second))
    }

    // MARK: Pieces

    /// `count` ASCII digits at `from` as a number; nil past the end or on any other byte.
    private static func number(_ bytes: [UInt8], _ from: Int, _ count: Int) -> Int? {
        guard from >= 0, from + count <= bytes.count else { return nil }
        var value = 0
        for byte in bytes[from..<(from + count)] {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            value = value * 10 + Int(byte - 0x30)
        }
        return value
    }

    /// Days since the epoch of a `YYYY-MM-DD` prefix that names a real day.
    private static func calendarDate(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 10, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
              let year = number(bytes, 0, 4), let month = number(bytes, 5, 2), let day = number(bytes, 8, 2),
              (1...12).contains(month), day >= 1 else { return nil }
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day <= lengths[month - 1] else { return nil }
        return CivilDate.daysSinceEpoch(year: year, month: month, day: day)
    }

    /// A real calendar day and a `HH:MM:SS` at 11 (hour < 24, minute < 60; the second is left to the caller).
    private static func dateAndTime(_ bytes: [UInt8]) -> (Int, (hour: Int, minute: Int, second: Int))? {
        guard let days = calendarDate(bytes), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              let hour = number(bytes, 11, 2), let minute = number(bytes, 14, 2), let second = number(bytes, 17, 2),
              hour < 24, minute < 60 else { return nil }
        return (days, (hour, minute, second))
    }

    /// `.digits` at `index` (moved past them); 0 when there is no `.`; nil for a `.` without digits.
    private static func fraction(_ bytes: [UInt8], _ index: inout Int) -> Double? {
        guard index < bytes.count, bytes[index] == UInt8(ascii: ".") else { return 0 }
        index += 1
        let start = index
        var value = 0.0
        var scale = 0.1
        while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
            value += Double(bytes[index] - 0x30) * scale
            scale /= 10
            index += 1
        }
        return index == start ? nil : value
    }
}
