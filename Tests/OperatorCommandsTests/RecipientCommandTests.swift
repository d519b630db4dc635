import Foundation
import JSON
import OperatorCommands
import Outbox
import Postgres
import TestSupport
import Testing

/// What the operator commands show and do about who gets the push (SPEC §3): the devices skipped because another
/// registration speaks for their token, deliveries per (patient, key), and rows the API's inline sender wrote.
@Suite("Operator commands: who gets the push", .blockingFixtures)
struct RecipientCommandTests {
    /// The phone that changed hands: `event ID` names the skipped row and why, in text and JSON.
    @Test func event_namesTheDeviceSkippedBecauseThePhoneChangedHands() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let devices = try rig.patient("pa", caregiver: "ca", tokens: ["phone-changed-hands-0001", "phone-of-a-only-00000001"])
            try rig.connection.query("""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt")
                VALUES ('b-row', \(literal: OwnerType.caregiver), 'cb', 'phone-changed-hands-0001', 'ios', 'PROD', false, now() - interval '10 minutes')
                """)
            let id = try rig.event(status: "DONE", hoursAgo: 1, key: "doseTaken:g", patient: "pa")
            try rig.delivery("del-a", key: "doseTaken:g", device: devices[1], status: "SENT")

            let json = try await rig.json("event", "\(id)")
            #expect(json.status == 0)
            let skipped = try #require(json.json["skipped"]?.arrayValue)
            #expect(skipped.count == 1)
            #expect(skipped[0]["pushDeviceId"] == .string(devices[0]))
            #expect(skipped[0]["ownerId"] == .string("ca"))
            #expect(skipped[0]["token"] == .string("phone-…s-0001"))
            #expect(skipped[0]["reason"] == .string("token_superseded"))
            #expect(skipped[0]["newestRegistration"]?["pushDeviceId"] == .string("b-row"))
            #expect(skipped[0]["newestRegistration"]?["ownerId"] == .string("cb"))
            #expect(skipped[0]["newestRegistration"]?["isEnabled"] == .bool(false))
            #expect(json.json["deliveries"]?.arrayValue?.map { $0["id"] } == [.string("del-a")])

            let text = try await rig.run("event", "\(id)")
            #expect(text.output.contains("not sent to (another registration speaks for the token): 1"), "\(text.output)")
            #expect(text.output.contains(devices[0]))
            #expect(text.output.contains("another registration of this token was seen more recently: device b-row of cb, last seen "))
            #expect(text.output.contains(", pushes switched off there"))
            #expect(!text.output.contains("phone-changed-hands-0001"))  // tokens stay masked
        }
    }

    /// Two patients' events share a key: `event` shows each its own patient's deliveries, and `resend --delivery`
    /// reopens the delivery's own patient's event, not the newest event of the key.
    @Test func eventAndResend_keepTwoPatientsWithOneKeyApart() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let first = try rig.patient("p1", caregiver: "c1", tokens: ["token-of-c1-aaaaaaaaaaaa"])
            let second = try rig.patient("p2", caregiver: "c2", tokens: ["token-of-c2-bbbbbbbbbbbb"])
            let event1 = try rig.event(status: "DONE", hoursAgo: 2, key: "doseTaken:shared", patient: "p1")
            let event2 = try rig.event(status: "DONE", hoursAgo: 1, key: "doseTaken:shared", patient: "p2")
            try rig.delivery("del-1", key: "doseTaken:shared", device: first[0], status: "FAILED", lastError: "THIRD_PARTY_AUTH_ERROR")
            try rig.delivery("del-2", key: "doseTaken:shared", device: second[0], status: "SENT")
            try rig.connection.query(#"UPDATE "PushDelivery" SET "patientId" = CASE id WHEN 'del-1' THEN 'p1' ELSE 'p2' END"#)

            #expect(try await rig.json("event", "\(event1)").json["deliveries"]?.arrayValue?.map { $0["id"] } == [.string("del-1")])
            #expect(try await rig.json("event", "\(event2)").json["deliveries"]?.arrayValue?.map { $0["id"] } == [.string("del-2")])

            let resent = try await rig.json("resend", "--delivery", "del-1")
            #expect(resent.status == 0)
            #expect(resent.json["event"] == .number(Double(event1)))
            #expect(try rig.scalar(#"SELECT status FROM "PushOutbox" WHERE id = \#(event1)"#) == "PENDING")
            #expect(try rig.scalar(#"SELECT status FROM "PushOutbox" WHERE id = \#(event2)"#) == "DONE")
        }
    }

    /// A FAILED delivery whose caregiver was revoked since, or whose phone changed hands, is not resent.
    @Test func resend_skipsRevokedLinksAndPhonesThatChangedHands() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let devices = try rig.patient("p1", caregiver: "c1", tokens: ["token-revoked-aaaaaaaaaa"])
            let handed = try rig.patient("p1", caregiver: "c3", tokens: ["token-handed-bbbbbbbbbbb"])
            try rig.patient("p9", caregiver: "c2", tokens: ["token-handed-bbbbbbbbbbb"])  // c2 registered c3's phone after c3
            try rig.connection.query(#"UPDATE "PushDevice" SET "lastSeenAt" = now() WHERE "ownerId" = 'c2'"#)
            try rig.connection.query(#"UPDATE "CaregiverPatientLink" SET status = \#(literal: LinkStatus.revoked) WHERE "caregiverId" = 'c1'"#)
            let id = try rig.event(status: "DONE", hoursAgo: 1, key: "doseTaken:g", patient: "p1")
            try rig.delivery("del-revoked", key: "doseTaken:g", device: devices[0], status: "FAILED", lastError: "THIRD_PARTY_AUTH_ERROR")
            try rig.delivery("del-handed", key: "doseTaken:g", device: handed[0], status: "FAILED", lastError: "THIRD_PARTY_AUTH_ERROR")
            let result = try await rig.json("resend", "--event", "\(id)")
            #expect(result.status == 1)
            #expect(result.json["resent"] == .array([]))
            let reasons = try #require(result.json["skipped"]?.arrayValue).map { "\($0["id"]?.stringValue ?? ""): \($0["reason"]?.stringValue ?? "")" }
            #expect(reasons.sorted() == [
                "del-handed: another registration of this token was seen more recently (the phone changed hands)",
                "del-revoked: the caregiver's link to the patient is no longer ACTIVE",
            ])
        }
    }

    /// The cutover: rows the API's inline sender writes are SENT, never pending, and `status` shows them apart.
    @Test func status_countsInlineSenderRowsAsSentByTheAPI_neverPending() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let devices = try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            try rig.connection.query(#"""
                INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", "createdAt") VALUES ('inline-1', 'doseTaken:x', \#(devices[0]), now()),
                    ('inline-2', 'doseTaken:y', \#(devices[0]), now())
                """#)
            try rig.delivery("worker-1", key: "doseTaken:z", device: devices[0], status: "SENT")
            let status = try await rig.json("status")
            #expect(status.json["deliveriesLastHour"]?["PENDING"] == .number(0))
            #expect(status.json["deliveriesLastHour"]?["SENT"] == .number(3))
            #expect(status.json["inlineSentLastHour"] == .number(2))
            let text = try await rig.run("status")
            #expect(text.output.contains("deliveries (1h): sent 3 (by the API's inline sender 2), failed 0, pending 0;"), "\(text.output)")
        }
    }
}
