import Foundation

/// A validated DOSE_TAKEN outbox payload (SPEC §2.2) and its eventKey (SPEC §3).
public struct DoseTakenEvent: Sendable, Equatable {
    public static let eventType = "DOSE_TAKEN"
    /// Valid `slot` values.
    public static let slots: Set<String> = ["morning", "noon", "evening", "bedtime"]

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

    private static let tokyo = TimeZone(identifier: "Asia/Tokyo")!

    /// `HH:mm` of an instant in Asia/Tokyo.
    static func tokyoHourMinute(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = tokyo
        let parts = calendar.dateComponents([.hour, .minute], from: date)
        return String(format: "%02d:%02d", parts.hour ?? 0, parts.minute ?? 0)
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

    /// ISO-8601 date-time with an explicit offset (`Z` or `±HH:MM`), optional fractional seconds.
    static func parseTimestamp(_ text: String) -> Date? {
        guard text.count <= 40, text.count >= 20 else { return nil }
        let plain = ISO8601DateFormatter()
        plain.formatOptions = [.withInternetDateTime]
        if let date = plain.date(from: text) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return fractional.date(from: text)
    }
}
