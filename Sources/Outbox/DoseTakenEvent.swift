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

    /// Validates one outbox row. Every refusal names the field and what was wrong.
    public static func parse(eventType: String, patientId: String, payload: String) throws(Invalid) -> DoseTakenEvent {
        try checkRow(eventType: eventType, patientId: patientId)
        // The usual shape is read in one pass; anything else goes to the JSON parser, which reads it the same way.
        if let scanned = PayloadFields.scan(payload) { return try validate(scanned, patientId: patientId) }
        return try validate(PayloadFields(parsing: payload), patientId: patientId)
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

    static func validate(_ fields: PayloadFields, patientId: String) throws(Invalid) -> DoseTakenEvent {
        let date = try string(fields.date, "date")
        guard TimestampReader.isCalendarDate(date) else { throw Invalid("payload.date \"\(date.prefix(32))\" is not a YYYY-MM-DD calendar date") }
        let slot = try string(fields.slot, "slot")
        guard slots.contains(slot) else {
            throw Invalid("payload.slot \"\(slot.prefix(32))\" is not one of bedtime, evening, morning, noon")
        }
        var recordingGroupId: String?
        switch fields.recordingGroupId {
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
        let withinTime = try bool(fields.withinTime, "withinTime", required: true) ?? false
        let isPrn = try bool(fields.isPrn, "isPrn", required: false) ?? false
        let takenAtText = try string(fields.takenAt, "takenAt")
        guard let takenAt = TimestampReader.rfc3339(takenAtText) else {
            throw Invalid("payload.takenAt \"\(takenAtText.prefix(40))\" is not ISO-8601 with a UTC offset")
        }
        return DoseTakenEvent(patientId: patientId, date: date, slot: slot, recordingGroupId: recordingGroupId,
                              withinTime: withinTime, isPrn: isPrn, takenAt: takenAt)
    }

    private static func string(_ member: PayloadFields.Member?, _ key: String) throws(Invalid) -> String {
        switch member {
        case .string(let value)?: return value
        case nil, .null?: throw Invalid("payload.\(key) is missing")
        case let other?: throw Invalid("payload.\(key) is a \(other.typeName), expected a string")
        }
    }

    private static func bool(_ member: PayloadFields.Member?, _ key: String, required: Bool) throws(Invalid) -> Bool? {
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

/// The members of a payload that `DoseTakenEvent` reads; the others are ignored.
struct PayloadFields {
    enum Member {
        case string(String)
        case bool(Bool)
        case null
        /// A number, an array or an object: only its type is reported.
        case other(typeName: String)

        init(_ value: JSONValue) {
            switch value {
            case .string(let text): self = .string(text)
            case .bool(let flag): self = .bool(flag)
            case .null: self = .null
            default: self = .other(typeName: value.typeName)
            }
        }

        var typeName: String {
            switch self {
            case .string: "string"
            case .bool: "boolean"
            case .null: "null"
            case .other(let typeName): typeName
            }
        }
    }

    var date: Member?
    var slot: Member?
    var recordingGroupId: Member?
    var withinTime: Member?
    var isPrn: Member?
    var takenAt: Member?

    init() {}

    init(_ members: [String: JSONValue]) {
        date = members["date"].map(Member.init)
        slot = members["slot"].map(Member.init)
        recordingGroupId = members["recordingGroupId"].map(Member.init)
        withinTime = members["withinTime"].map(Member.init)
        isPrn = members["isPrn"].map(Member.init)
        takenAt = members["takenAt"].map(Member.init)
    }

    /// Reads any payload with the JSON parser; refuses text that is not a JSON object.
    init(parsing payload: String) throws(DoseTakenEvent.Invalid) {
        guard let json = JSONValue.parse(payload) else { throw DoseTakenEvent.Invalid("payload is not valid JSON") }
        guard case .object(let members) = json else { throw DoseTakenEvent.Invalid("payload is a JSON \(json.typeName), expected an object") }
        self.init(members)
    }

    /// Reads the usual payload, PostgreSQL's text of a flat jsonb object, in one pass without building a dictionary
    /// (this runs once per claimed event). Only what it reads exactly as the JSON parser would is taken: an object
    /// whose keys are ASCII without escapes and whose values are strings without escapes, `true`, `false` or `null`.
    /// Anything else (a number, a nested value, an escape, a key outside ASCII, text that is not JSON) returns nil,
    /// and the JSON parser reads the payload instead; the last of repeated keys wins in both.
    static func scan(_ payload: String) -> PayloadFields? {
        var text = payload
        return text.withUTF8 { bytes -> PayloadFields? in
            var index = 0
            let count = bytes.count
            func skipSpace() {
                while index < count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
                    index += 1
                }
            }
            /// The bytes of a string without escapes or control bytes, the opening quote at `index`.
            func plainString(asciiOnly: Bool) -> Range<Int>? {
                index += 1
                let start = index
                while index < count {
                    let byte = bytes[index]
                    if byte == 0x22 { index += 1; return start..<(index - 1) }
                    if byte == 0x5C || byte < 0x20 || (asciiOnly && byte >= 0x80) { return nil }
                    index += 1
                }
                return nil
            }
            func literal(_ word: StaticString) -> Bool {
                let length = word.utf8CodeUnitCount
                guard index + length <= count else { return false }
                for offset in 0..<length where bytes[index + offset] != word.utf8Start[offset] { return false }
                index += length
                return true
            }
            func matches(_ key: Range<Int>, _ name: StaticString) -> Bool {
                guard key.count == name.utf8CodeUnitCount else { return false }
                for offset in 0..<key.count where bytes[key.lowerBound + offset] != name.utf8Start[offset] { return false }
                return true
            }

            var fields = PayloadFields()
            skipSpace()
            guard index < count, bytes[index] == 0x7B else { return nil }
            index += 1
            skipSpace()
            if index < count, bytes[index] == 0x7D {
                index += 1
            } else {
                while true {
                    skipSpace()
                    guard index < count, bytes[index] == 0x22, let key = plainString(asciiOnly: true) else { return nil }
                    skipSpace()
                    guard index < count, bytes[index] == 0x3A else { return nil }
                    index += 1
                    skipSpace()
                    guard index < count else { return nil }
                    let member: Member
                    switch bytes[index] {
                    case 0x22:
                        guard let value = plainString(asciiOnly: false) else { return nil }
                        member = .string(String(decoding: UnsafeBufferPointer(rebasing: bytes[value]), as: UTF8.self))
                    case UInt8(ascii: "t"):
                        guard literal("true") else { return nil }
                        member = .bool(true)
                    case UInt8(ascii: "f"):
                        guard literal("false") else { return nil }
                        member = .bool(false)
                    case UInt8(ascii: "n"):
                        guard literal("null") else { return nil }
                        member = .null
                    default:
                        return nil
                    }
                    if matches(key, "date") { fields.date = member }
                    else if matches(key, "slot") { fields.slot = member }
                    else if matches(key, "recordingGroupId") { fields.recordingGroupId = member }
                    else if matches(key, "withinTime") { fields.withinTime = member }
                    else if matches(key, "isPrn") { fields.isPrn = member }
                    else if matches(key, "takenAt") { fields.takenAt = member }
                    skipSpace()
                    guard index < count else { return nil }
                    if bytes[index] == 0x2C { index += 1; continue }
                    if bytes[index] == 0x7D { index += 1; break }
                    return nil
                }
            }
            skipSpace()
            return index == count ? fields : nil
        }
    }
}
