import Foundation
import Outbox
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
