import FoundationEssentials
import JSON
import Timekeeping

/// A validated DOSE_TAKEN outbox payload (docs/database.md, "Enqueueing a DOSE_TAKEN event") and its eventKey.
public struct DoseTakenEvent: Sendable, Equatable {
    public static let eventType = "DOSE_TAKEN"
    /// Valid `slot` values.
    public static let slots: Set<String> = ["morning", "noon", "evening", "bedtime"]
    /// Longest `recordingGroupId` and `patientId` accepted: the eventKey must fit the indexes.
    public static let maxIdentifierLength = 200

    public let patientId: String
    /// `YYYY-MM-DD`.
    public let date: String
    public let slot: String
    public let recordingGroupId: String?
    public let withinTime: Bool
    public let isPrn: Bool
    /// The instant of `takenAt`.
    public let takenAt: Date
    /// `doseTaken:{recordingGroupId}`, else `doseTaken:{patientId}:{date}:{slot}:{HH:mm}` with
    /// HH:mm being `takenAt` in Asia/Tokyo, so retries compute the same key. Made once (the claim, the fan-out and
    /// the grouping each read it); the fields it comes from never change.
    public let eventKey: String

    init(patientId: String, date: String, slot: String, recordingGroupId: String?, withinTime: Bool, isPrn: Bool, takenAt: Date) {
        self.patientId = patientId
        self.date = date
        self.slot = slot
        self.recordingGroupId = recordingGroupId
        self.withinTime = withinTime
        self.isPrn = isPrn
        self.takenAt = takenAt
        eventKey = recordingGroupId.map { "doseTaken:\($0)" } ?? "doseTaken:\(patientId):\(date):\(slot):\(Self.tokyoHourMinute(takenAt))"
    }

    /// Why a payload was refused; the text goes to `"lastError"` verbatim.
    public struct Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
        init(_ reason: String) { self.reason = reason }
    }

    /// Validates one outbox row. Every refusal names the field and what was wrong. The payload is read with `JSONValue`
    /// (docs/benchmark.md, "JSON and timestamps read by Foundation": `JSONDecoder` costs several µs more per event).
    public static func parse(eventType: String, patientId: String, payload: String) throws(Invalid) -> DoseTakenEvent {
        try checkRow(eventType: eventType, patientId: patientId)
        guard let json = JSONValue.parse(payload) else { throw Invalid("payload is not valid JSON") }
        guard case .object(let members) = json else { throw Invalid("payload is a JSON \(json.typeName), expected an object") }
        return try validate(members, patientId: patientId)
    }

    /// The row's columns beside the payload: the event type, and a patient id within bounds.
    static func checkRow(eventType: String, patientId: String) throws(Invalid) {
        guard eventType == Self.eventType else {
            throw Invalid("unknown eventType \"\(eventType.prefix(64))\" (expected \(Self.eventType))")
        }
        guard !patientId.isEmpty else { throw Invalid("patientId is empty") }
        // Characters are counted only when the bytes could be too many (a character is at least one byte).
        if patientId.utf8.count > maxIdentifierLength {
            let length = patientId.count
            guard length <= maxIdentifierLength else {
                throw Invalid("patientId is \(length) characters; at most \(maxIdentifierLength) are allowed")
            }
        }
    }

    /// The payload's members that make the event, checked; the others are ignored.
    static func validate(_ members: [String: JSONValue], patientId: String) throws(Invalid) -> DoseTakenEvent {
        let date = try string(members["date"], "date")
        guard TimestampReader.isCalendarDate(date) else { throw Invalid("payload.date \"\(date.prefix(32))\" is not a YYYY-MM-DD calendar date") }
        let slot = try string(members["slot"], "slot")
        guard slots.contains(slot) else {
            throw Invalid("payload.slot \"\(slot.prefix(32))\" is not one of bedtime, evening, morning, noon")
        }
        var recordingGroupId: String?
        switch members["recordingGroupId"] {
        case nil, .null?: recordingGroupId = nil
        case .string(let value)?:
            guard !value.isEmpty else { throw Invalid("payload.recordingGroupId is an empty string (omit it or use null)") }
            if value.utf8.count > maxIdentifierLength {
                let length = value.count
                guard length <= maxIdentifierLength else {
                    throw Invalid("payload.recordingGroupId is \(length) characters; at most \(maxIdentifierLength) are allowed")
                }
            }
            recordingGroupId = value
        case let other?: throw Invalid("payload.recordingGroupId is a \(other.typeName), expected a string or null")
        }
        let withinTime = try bool(members["withinTime"], "withinTime", required: true) ?? false
        let isPrn = try bool(members["isPrn"], "isPrn", required: false) ?? false
        let takenAtText = try string(members["takenAt"], "takenAt")
        guard let takenAt = TimestampReader.rfc3339(takenAtText) else {
            throw Invalid("payload.takenAt \"\(takenAtText.prefix(40))\" is not ISO-8601 with a UTC offset")
        }
        return DoseTakenEvent(patientId: patientId, date: date, slot: slot, recordingGroupId: recordingGroupId,
                              withinTime: withinTime, isPrn: isPrn, takenAt: takenAt)
    }

    private static func string(_ member: JSONValue?, _ key: String) throws(Invalid) -> String {
        switch member {
        case .string(let value)?: return value
        case nil, .null?: throw Invalid("payload.\(key) is missing")
        case let other?: throw Invalid("payload.\(key) is a \(other.typeName), expected a string")
        }
    }

    private static func bool(_ member: JSONValue?, _ key: String, required: Bool) throws(Invalid) -> Bool? {
        switch member {
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
}
