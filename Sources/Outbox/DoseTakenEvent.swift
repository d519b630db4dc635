import FoundationEssentials
import JSON
import Timekeeping

/// A validated DOSE_TAKEN outbox payload (SPEC §2.2) and its eventKey (SPEC §3).
public struct DoseTakenEvent: Sendable, Equatable {
    public static let eventType = "DOSE_TAKEN"
    /// Valid `slot` values.
    public static let slots: Set<String> = ["morning", "noon", "evening", "bedtime"]
    /// Longest `recordingGroupId` (SPEC §3 "Bad input") and `patientId` accepted: the eventKey must fit the indexes.
    public static let maxIdentifierLength = 200

    public var patientId: String
    /// `YYYY-MM-DD`.
    public var date: String
    public var slot: String
    public var recordingGroupId: String?
    public var withinTime: Bool
    public var isPrn: Bool
    /// The instant of `takenAt`.
    public var takenAt: Date

    /// `doseTaken:{recordingGroupId}`, else `doseTaken:{patientId}:{date}:{slot}:{HH:mm}` with
    /// HH:mm being `takenAt` in Asia/Tokyo, so retries compute the same key.
    public var eventKey: String {
        if let recordingGroupId { return "doseTaken:\(recordingGroupId)" }
        return "doseTaken:\(patientId):\(date):\(slot):\(Self.tokyoHourMinute(takenAt))"
    }

    /// Why a payload was refused; the text goes to `"lastError"` verbatim.
    public struct Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
        init(_ reason: String) { self.reason = reason }
    }

    /// Validates one outbox row. Every refusal names the field and what was wrong.
    public static func parse(eventType: String, patientId: String, payload: String) throws(Invalid) -> DoseTakenEvent {
        guard eventType == Self.eventType else {
            throw Invalid("unknown eventType \"\(eventType.prefix(64))\" (expected \(Self.eventType))")
        }
        guard !patientId.isEmpty else { throw Invalid("patientId is empty") }
        let patientIdLength = patientId.count
        guard patientIdLength <= maxIdentifierLength else {
            throw Invalid("patientId is \(patientIdLength) characters; at most \(maxIdentifierLength) are allowed")
        }
        guard let json = JSONValue.parse(payload) else { throw Invalid("payload is not valid JSON") }
        guard case .object(let fields) = json else { throw Invalid("payload is a JSON \(json.typeName), expected an object") }

        let date = try string(fields, "date")
        guard isCalendarDate(date) else { throw Invalid("payload.date \"\(date.prefix(32))\" is not a YYYY-MM-DD calendar date") }
        let slot = try string(fields, "slot")
        guard slots.contains(slot) else {
            throw Invalid("payload.slot \"\(slot.prefix(32))\" is not one of bedtime, evening, morning, noon")
        }
        var recordingGroupId: String?
        switch fields["recordingGroupId"] {
        case nil, .null?: recordingGroupId = nil
        case .string(let value)?:
            guard !value.isEmpty else { throw Invalid("payload.recordingGroupId is an empty string (omit it or use null)") }
            let length = value.count
            guard length <= maxIdentifierLength else {
                throw Invalid("payload.recordingGroupId is \(length) characters; at most \(maxIdentifierLength) are allowed")
            }
            recordingGroupId = value
        case let other?: throw Invalid("payload.recordingGroupId is a \(other.typeName), expected a string or null")
        }
        let withinTime = try bool(fields, "withinTime", required: true) ?? false
        let isPrn = try bool(fields, "isPrn", required: false) ?? false
        let takenAtText = try string(fields, "takenAt")
        guard let takenAt = parseTimestamp(takenAtText) else {
            throw Invalid("payload.takenAt \"\(takenAtText.prefix(40))\" is not ISO-8601 with a UTC offset")
        }
        return DoseTakenEvent(patientId: patientId, date: date, slot: slot, recordingGroupId: recordingGroupId,
                              withinTime: withinTime, isPrn: isPrn, takenAt: takenAt)
    }

    private static func string(_ fields: [String: JSONValue], _ key: String) throws(Invalid) -> String {
        switch fields[key] {
        case .string(let value)?: return value
        case nil, .null?: throw Invalid("payload.\(key) is missing")
        case let other?: throw Invalid("payload.\(key) is a \(other.typeName), expected a string")
        }
    }

    private static func bool(_ fields: [String: JSONValue], _ key: String, required: Bool) throws(Invalid) -> Bool? {
        switch fields[key] {
        case .bool(let value)?: return value
        case nil, .null?:
            if required { throw Invalid("payload.\(key) is missing") }
            return nil
        case let other?: throw Invalid("payload.\(key) is a \(other.typeName), expected true or false")
        }
    }

    /// `HH:mm` of an instant in Asia/Tokyo, which has kept UTC+09:00 without daylight saving since 1951.
    static func tokyoHourMinute(_ date: Date) -> String {
        let seconds = Int((date.timeIntervalSince1970 + 9 * 3600).rounded(.down))
        let ofDay = ((seconds % 86_400) + 86_400) % 86_400
        let hour = ofDay / 3600, minute = ofDay % 3600 / 60
        return (hour < 10 ? "0" : "") + String(hour) + ":" + (minute < 10 ? "0" : "") + String(minute)
    }

    static func isCalendarDate(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 10, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-") else { return false }
        let digits = bytes.enumerated().filter { $0.offset != 4 && $0.offset != 7 }.map(\.element)
        guard digits.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return false }
        guard let year = Int(text.prefix(4)), let month = Int(text.dropFirst(5).prefix(2)), let day = Int(text.suffix(2)),
              (1...12).contains(month), day >= 1 else { return false }
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        return day <= lengths[month - 1]
    }

    /// ISO-8601 date-time with an explicit offset (`Z` or `±HH:MM`), optional fractional seconds:
    /// `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`, parsed over bytes (no formatter per call).
    static func parseTimestamp(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 40 else { return nil }
        func number(_ from: Int, _ length: Int) -> Int? {
            var value = 0
            for index in from..<(from + length) {
                let byte = bytes[index]
                guard byte >= 0x30, byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        guard bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              isCalendarDate(String(decoding: bytes[0..<10], as: UTF8.self)), hour < 24, minute < 60, second < 61 else { return nil }
        var index = 19
        var fraction = 0.0
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            let start = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
                fraction += Double(bytes[index] - 0x30) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        guard index < bytes.count else { return nil }
        var offset = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard index + 6 == bytes.count, bytes[index + 3] == UInt8(ascii: ":"),
                  let offsetHours = number(index + 1, 2), let offsetMinutes = number(index + 4, 2),
                  offsetHours < 24, offsetMinutes < 60 else { return nil }
            offset = (offsetHours * 3600 + offsetMinutes * 60) * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
            index += 6
        default:
            return nil
        }
        guard index == bytes.count else { return nil }
        let days = CivilDate.daysSinceEpoch(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + min(second, 59) - offset
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }
}
