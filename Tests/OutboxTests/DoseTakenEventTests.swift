import Foundation
@testable import Outbox
import Testing

@Suite("DOSE_TAKEN payload")
struct DoseTakenEventTests {
    @Test func eventKey_usesRecordingGroupWhenPresent() throws {
        let event = try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: "p1", payload: #"{"date":"2026-02-11","slot":"morning","recordingGroupId":"group-uuid-1","withinTime":true,"isPrn":false,"takenAt":"2026-02-11T08:03:27+09:00"}"#)
        #expect(event.eventKey == "doseTaken:group-uuid-1")
    }

    /// 23:30 UTC on the 10th is 08:30 on the 11th in Tokyo: the key uses Tokyo's clock time.
    @Test func eventKey_withoutGroupUsesTokyoTime() throws {
        let event = try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: "p1", payload: #"{"date":"2026-02-11","slot":"morning","withinTime":false,"takenAt":"2026-02-10T23:30:59Z"}"#)
        #expect(event.eventKey == "doseTaken:p1:2026-02-11:morning:08:30")
        let null = try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: "p1", payload: #"{"date":"2026-02-11","slot":"morning","recordingGroupId":null,"withinTime":false,"takenAt":"2026-02-11T08:30:00.250+09:00"}"#)
        #expect(null.eventKey == "doseTaken:p1:2026-02-11:morning:08:30")
    }

    @Test(arguments: [
        ("DOSE_SKIPPED", #"{}"#, "unknown eventType"),
        ("DOSE_TAKEN", #"[1,2]"#, "payload is a JSON array"),
        ("DOSE_TAKEN", #"not json"#, "payload is not valid JSON"),
        ("DOSE_TAKEN", #"{"slot":"morning","withinTime":true,"takenAt":"2026-02-11T08:03:27+09:00"}"#, "payload.date is missing"),
        ("DOSE_TAKEN", #"{"date":"2026-02-30","slot":"morning","withinTime":true,"takenAt":"2026-02-11T08:03:27+09:00"}"#, "payload.date"),
        ("DOSE_TAKEN", #"{"date":"2026-02-11","slot":"lunch","withinTime":true,"takenAt":"2026-02-11T08:03:27+09:00"}"#, "payload.slot"),
        ("DOSE_TAKEN", #"{"date":"2026-02-11","slot":"noon","withinTime":"yes","takenAt":"2026-02-11T08:03:27+09:00"}"#, "payload.withinTime is a string"),
        ("DOSE_TAKEN", #"{"date":"2026-02-11","slot":"noon","withinTime":true,"takenAt":"2026-02-11 08:03"}"#, "payload.takenAt"),
        ("DOSE_TAKEN", #"{"date":"2026-02-11","slot":"noon","withinTime":true,"takenAt":"2026-02-11T08:03:27"}"#, "payload.takenAt"),
        ("DOSE_TAKEN", #"{"date":"2026-02-11","slot":"noon","withinTime":true,"recordingGroupId":5,"takenAt":"2026-02-11T08:03:27Z"}"#, "payload.recordingGroupId is a number"),
    ])
    func invalidPayload_isRefusedWithAReasonNamingTheField(eventType: String, payload: String, reason: String) {
        #expect {
            _ = try DoseTakenEvent.parse(eventType: eventType, patientId: "p1", payload: payload)
        } throws: { error in
            (error as? DoseTakenEvent.Invalid)?.reason.contains(reason) == true
        }
    }

    /// At most 200 characters (not bytes) in patientId and recordingGroupId: 200 three-byte characters pass, a 201st
    /// character is refused with the count, in ASCII as in CJK and in characters made of several scalars.
    @Test(arguments: ["a", "患", "e\u{301}"])
    func identifiers_areLimitedTo200Characters(character: String) throws {
        let payload = { (group: String) in
            #"{"date":"2026-02-11","slot":"noon","withinTime":true,"recordingGroupId":"\#(group)","takenAt":"2026-02-11T08:03:27Z"}"#
        }
        let fits = String(repeating: character, count: 200), over = String(repeating: character, count: 201)
        let event = try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: fits, payload: payload(fits))
        #expect(event.patientId == fits && event.eventKey == "doseTaken:" + fits)
        #expect {
            _ = try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: over, payload: payload("g"))
        } throws: { error in
            (error as? DoseTakenEvent.Invalid)?.reason == "patientId is 201 characters; at most 200 are allowed"
        }
        #expect {
            _ = try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: "p1", payload: payload(over))
        } throws: { error in
            (error as? DoseTakenEvent.Invalid)?.reason == "payload.recordingGroupId is 201 characters; at most 200 are allowed"
        }
    }
}

/// `DoseTakenEvent.parse` reads the usual payload in one pass and leaves anything else to the JSON parser; on every
/// input the two readings must agree: the same event, or the same refusal with the same text.
@Suite("DOSE_TAKEN payload: the one-pass scan agrees with the JSON parser")
struct DoseTakenEventScanTests {
    /// PostgreSQL's text of a jsonb payload (`payload::text`, as the claim reads it), and other spellings.
    static let usual = [
        #"{"date": "2026-02-11", "slot": "morning", "isPrn": false, "takenAt": "2026-02-11T08:03:27+09:00", "withinTime": true, "recordingGroupId": "group-uuid-1"}"#,
        #"{"date": "2026-02-11", "slot": "noon", "isPrn": true, "takenAt": "2026-02-10T23:30:59Z", "withinTime": false, "recordingGroupId": null}"#,
        #"{"date":"2026-02-11","slot":"bedtime","withinTime":true,"takenAt":"2026-02-11T08:03:27.250+09:00"}"#,
        " \n{ \"date\" :\t\"2026-02-11\" ,\r\n \"slot\":\"evening\", \"withinTime\":true, \"takenAt\":\"2026-02-11T08:03:27Z\" } \n",
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": "患者-グループ"}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "note": "extra", "flag": null}"#,
    ]

    /// Shapes the scan must leave to the parser, and refusals: escapes, numbers, nesting, repeated keys, keys outside
    /// ASCII, wrong types, text that is not JSON.
    static let unusual = [
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": "a\"b\\c\u00e9\ud83d\ude00"}"#,
        #"{"d\u0061te": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "version": 2, "meta": {"a": [1, {"b": null}]}}"#,
        #"{"date": "2026-02-11", "date": "2026-02-12", "slot": "noon", "slot": "morning", "withinTime": false, "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"dáte": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"date": 20260211, "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"date": "2026-02-11", "slot": ["morning"], "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": "true", "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": 1, "isPrn": {}, "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "isPrn": "no", "takenAt": "2026-02-11T08:03:27Z"}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": ""}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": false}"#,
        #"{"date": null, "slot": "morning", "withinTime": null, "takenAt": "2026-02-11T08:03:27Z"}"#,
        "{\"date\": \"2026-02-11\", \"slot\": \"morning\", \"withinTime\": true, \"takenAt\": \"2026-02-11T08:03:27Z\", \"recordingGroupId\": \"tab\there\"}",
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"} {}"#,
        #"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z",}"#,
        #"{"date": "2026-02-11" "slot": "morning"}"#,
        #"{"date": tru, "slot": "morning"}"#,
        #"{}"#, #"{ }"#, #"[]"#, #""text""#, "null", "true", "", " ", "{", "}", #"{"date""#, #"{"date":}"#,
    ]

    @Test func usualPayloads_areScanned_andReadAsTheParserReadsThem() {
        for payload in Self.usual {
            #expect(DoseTakenEvent.isScanned(payload), "not scanned: \(payload)")
            expectSameReading(payload)
        }
    }

    @Test func unusualPayloads_readAsTheParserReadsThem() {
        for payload in Self.unusual { expectSameReading(payload) }
        // What must go to the parser does.
        #expect(!DoseTakenEvent.isScanned(Self.unusual[0]) && !DoseTakenEvent.isScanned(Self.unusual[1]) && !DoseTakenEvent.isScanned(Self.unusual[2]))
    }

    /// Every prefix of every payload (a truncated row), and each with a byte changed, dropped or doubled at every
    /// position (a deterministic sweep over the bytes that steer a JSON reader).
    @Test func truncatedAndMutatedPayloads_readAsTheParserReadsThem() {
        let steering = Array(#"{}[]":,\ tfnu0"#.utf8) + [0x0A, 0xC3]
        var checked = 0
        for payload in Self.usual + Self.unusual.prefix(4) {
            let bytes = Array(payload.utf8)
            for end in 0..<bytes.count {
                expectSameReading(String(decoding: bytes[..<end], as: UTF8.self)); checked += 1
            }
            for position in bytes.indices {
                var dropped = bytes; dropped.remove(at: position)
                var doubled = bytes; doubled.insert(bytes[position], at: position)
                expectSameReading(String(decoding: dropped, as: UTF8.self))
                expectSameReading(String(decoding: doubled, as: UTF8.self))
                let replacement = steering[(position * 7 + bytes.count) % steering.count]
                var changed = bytes; changed[position] = replacement
                expectSameReading(String(decoding: changed, as: UTF8.self))
                checked += 3
            }
        }
        #expect(checked > 5_000)
    }

    private func expectSameReading(_ payload: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let scanned = Result { () throws(DoseTakenEvent.Invalid) in
            try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: "p1", payload: payload)
        }
        let parsed = Result { () throws(DoseTakenEvent.Invalid) in
            try DoseTakenEvent.parsedWithoutScan(eventType: "DOSE_TAKEN", patientId: "p1", payload: payload)
        }
        #expect(scanned == parsed, "payload: \(payload)", sourceLocation: sourceLocation)
    }
}

extension DoseTakenEvent {
    /// Whether `payload` is read by the one-pass scan rather than the JSON parser.
    static func isScanned(_ payload: String) -> Bool { PayloadFields.scan(payload) != nil }

    /// `parse` with every payload read by the JSON parser, without the scan for the usual shape: the tests compare the
    /// two readings.
    static func parsedWithoutScan(eventType: String, patientId: String, payload: String) throws(Invalid) -> DoseTakenEvent {
        try checkRow(eventType: eventType, patientId: patientId)
        return try validate(PayloadFields(parsing: payload), patientId: patientId)
    }
}
