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

/// Payloads as PostgreSQL prints them and odd ones (escapes, numbers, nesting, repeated keys, keys outside ASCII, wrong
/// types, text that is not JSON): each is read to the event, or refused with the reason, word for word.
@Suite("DOSE_TAKEN payload: spellings and odd shapes")
struct DoseTakenEventShapeTests {
    /// PostgreSQL's text of a jsonb payload (`payload::text`, as the claim reads it), and other spellings.
    static let usual: [(payload: String, reading: String)] = [
        (#"{"date": "2026-02-11", "slot": "morning", "isPrn": false, "takenAt": "2026-02-11T08:03:27+09:00", "withinTime": true, "recordingGroupId": "group-uuid-1"}"#,
         "doseTaken:group-uuid-1 withinTime=true isPrn=false at 1770764607.0"),
        (#"{"date": "2026-02-11", "slot": "noon", "isPrn": true, "takenAt": "2026-02-10T23:30:59Z", "withinTime": false, "recordingGroupId": null}"#,
         "doseTaken:p1:2026-02-11:noon:08:30 withinTime=false isPrn=true at 1770766259.0"),
        (#"{"date":"2026-02-11","slot":"bedtime","withinTime":true,"takenAt":"2026-02-11T08:03:27.250+09:00"}"#,
         "doseTaken:p1:2026-02-11:bedtime:08:03 withinTime=true isPrn=false at 1770764607.25"),
        (" \n{ \"date\" :\t\"2026-02-11\" ,\r\n \"slot\":\"evening\", \"withinTime\":true, \"takenAt\":\"2026-02-11T08:03:27Z\" } \n",
         "doseTaken:p1:2026-02-11:evening:17:03 withinTime=true isPrn=false at 1770797007.0"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": "患者-グループ"}"#,
         "doseTaken:患者-グループ withinTime=true isPrn=false at 1770797007.0"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "note": "extra", "flag": null}"#,
         "doseTaken:p1:2026-02-11:morning:17:03 withinTime=true isPrn=false at 1770797007.0"),
    ]

    static let unusual: [(payload: String, reading: String)] = [
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": "a\"b\\c\u00e9\ud83d\ude00"}"#,
         "doseTaken:a\"b\\cé😀 withinTime=true isPrn=false at 1770797007.0"),
        (#"{"d\u0061te": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
         "doseTaken:p1:2026-02-11:morning:17:03 withinTime=true isPrn=false at 1770797007.0"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "version": 2, "meta": {"a": [1, {"b": null}]}}"#,
         "doseTaken:p1:2026-02-11:morning:17:03 withinTime=true isPrn=false at 1770797007.0"),
        // The last of repeated keys wins.
        (#"{"date": "2026-02-11", "date": "2026-02-12", "slot": "noon", "slot": "morning", "withinTime": false, "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
         "doseTaken:p1:2026-02-12:morning:17:03 withinTime=true isPrn=false at 1770797007.0"),
        (#"{"dáte": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#, "payload.date is missing"),
        (#"{"date": 20260211, "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
         "payload.date is a number, expected a string"),
        (#"{"date": "2026-02-11", "slot": ["morning"], "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"}"#,
         "payload.slot is a array, expected a string"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": "true", "takenAt": "2026-02-11T08:03:27Z"}"#,
         "payload.withinTime is a string, expected true or false"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": 1, "isPrn": {}, "takenAt": "2026-02-11T08:03:27Z"}"#,
         "payload.withinTime is a number, expected true or false"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "isPrn": "no", "takenAt": "2026-02-11T08:03:27Z"}"#,
         "payload.isPrn is a string, expected true or false"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": ""}"#,
         "payload.recordingGroupId is an empty string (omit it or use null)"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z", "recordingGroupId": false}"#,
         "payload.recordingGroupId is a boolean, expected a string or null"),
        (#"{"date": null, "slot": "morning", "withinTime": null, "takenAt": "2026-02-11T08:03:27Z"}"#, "payload.date is missing"),
        ("{\"date\": \"2026-02-11\", \"slot\": \"morning\", \"withinTime\": true, \"takenAt\": \"2026-02-11T08:03:27Z\", \"recordingGroupId\": \"tab\there\"}",
         "payload is not valid JSON"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z"} {}"#, "payload is not valid JSON"),
        (#"{"date": "2026-02-11", "slot": "morning", "withinTime": true, "takenAt": "2026-02-11T08:03:27Z",}"#, "payload is not valid JSON"),
        (#"{"date": "2026-02-11" "slot": "morning"}"#, "payload is not valid JSON"),
        (#"{"date": tru, "slot": "morning"}"#, "payload is not valid JSON"),
        (#"{}"#, "payload.date is missing"), (#"{ }"#, "payload.date is missing"),
        (#"[]"#, "payload is a JSON array, expected an object"), (#""text""#, "payload is a JSON string, expected an object"),
        ("null", "payload is a JSON null, expected an object"), ("true", "payload is a JSON boolean, expected an object"),
        ("", "payload is not valid JSON"), (" ", "payload is not valid JSON"), ("{", "payload is not valid JSON"),
        ("}", "payload is not valid JSON"), (#"{"date""#, "payload is not valid JSON"), (#"{"date":}"#, "payload is not valid JSON"),
    ]

    @Test func everyShape_isReadOrRefusedAsBefore() {
        for (payload, reading) in Self.usual + Self.unusual {
            #expect(Self.reading(payload) == reading, "payload: \(payload)")
        }
    }

    /// Every prefix of every payload (a truncated row), and each with a byte changed, dropped or doubled at every
    /// position (a deterministic sweep over the bytes that steer a JSON reader): read to a valid event, or refused with
    /// a reason about the payload; never anything else.
    @Test func truncatedAndMutatedPayloads_areReadOrRefused() {
        let steering = Array(#"{}[]":,\ tfnu0"#.utf8) + [0x0A, 0xC3]
        var checked = 0
        for payload in (Self.usual + Self.unusual.prefix(4)).map(\.payload) {
            let bytes = Array(payload.utf8)
            var variants = (0..<bytes.count).map { Array(bytes[..<$0]) }
            for position in bytes.indices {
                var dropped = bytes; dropped.remove(at: position)
                var doubled = bytes; doubled.insert(bytes[position], at: position)
                var changed = bytes; changed[position] = steering[(position * 7 + bytes.count) % steering.count]
                variants += [dropped, doubled, changed]
            }
            for variant in variants {
                let reading = Self.reading(String(decoding: variant, as: UTF8.self))
                #expect(reading.hasPrefix("doseTaken:") || reading.hasPrefix("payload"), "\(reading)")
                checked += 1
            }
        }
        #expect(checked > 5_000)
    }

    /// The event's key, flags and instant, or the refusal's text.
    static func reading(_ payload: String) -> String {
        do {
            let event = try DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: "p1", payload: payload)
            return "\(event.eventKey) withinTime=\(event.withinTime) isPrn=\(event.isPrn) at \(event.takenAt.timeIntervalSince1970)"
        } catch {
            return error.reason
        }
    }
}
