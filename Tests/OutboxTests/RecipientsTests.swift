import Foundation
import Outbox
import Postgres
import Push
import TestSupport
import Testing

/// Who gets the push (SPEC §3): a token's newest registration speaks for it, an event is its patient and key, recipients
/// are decided when the push leaves, and a row the API's inline sender wrote is never sent again (SPEC §2.2).
@Suite("Who gets the push", .blockingFixtures)
struct RecipientsTests {
    /// A device row of `owner` for `token`, last seen `ago` before now.
    static func device(_ db: Fixtures, owner: String, token: String, id: String, lastSeen ago: String, enabled: Bool = true) throws {
        try db.connection.query("""
            INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt")
            VALUES (\(id), \(literal: OwnerType.caregiver), \(owner), \(token), 'ios', 'PROD', \(enabled), now() - \(ago)::interval)
            """)
    }

    /// Caregiver A used a phone and signed out without switching pushes off; caregiver B signed in on it and registered
    /// the same token. A second phone passed from A to B too, and B switched pushes off there. A's patient's dose goes
    /// only to the phone A still holds; both shared phones are skipped, counted and not failed.
    @Test func aPhoneThatChangedHands_getsNoneOfTheOldOwnersPushes() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("pa", name: "Aの患者")
            try db.patient("pb", name: "Bの患者")
            try db.link(caregiver: "ca", patient: "pa")
            try db.link(caregiver: "cb", patient: "pb")
            try Self.device(db, owner: "ca", token: "phone-1", id: "a-phone-1", lastSeen: "2 days")
            try Self.device(db, owner: "cb", token: "phone-1", id: "b-phone-1", lastSeen: "10 minutes")
            try Self.device(db, owner: "ca", token: "phone-2", id: "a-phone-2", lastSeen: "3 days")
            try Self.device(db, owner: "cb", token: "phone-2", id: "b-phone-2", lastSeen: "1 hour", enabled: false)
            try Self.device(db, owner: "ca", token: "phone-3", id: "a-phone-3", lastSeen: "1 day")
            let forA = try db.enqueue(patient: "pa", payload: Fixtures.payload(group: "ga"))
            let forB = try db.enqueue(patient: "pb", payload: Fixtures.payload(group: "gb"))
            let sender = FakeSender()
            let (worker, metrics, _) = makeWorker(conninfo, sender: sender)
            #expect(try await worker.drain() == 2)
            let pushes = sender.pushes.map { "\($0.token) \($0.patientId)" }.sorted()
            #expect(pushes == ["phone-1 pb", "phone-3 pa"])
            #expect(try db.eventStatus(forA).status == .done)
            #expect(try db.eventStatus(forB).status == .done)
            // Not sent to, and not a failure of the event: no delivery row for the skipped devices.
            #expect(try db.deliveries().map(\.device) == ["a-phone-3", "b-phone-1"])
            #expect(metrics.value("push_recipients_skipped_total", labels: ["reason": "token_superseded"]) == 2)
        }
    }

    /// N links and N devices per owner: each caregiver's devices are judged one by one.
    @Test func manyLinksAndDevices_onlyTheNewestRegistrationOfEachTokenIsSent() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            for caregiver in ["c1", "c2", "c3"] { try db.link(caregiver: caregiver, patient: "p1") }
            // c1 and c2 both registered "shared"; c2 most recently. c3's row of "shared" is newest of all but disabled.
            try Self.device(db, owner: "c1", token: "shared", id: "c1-shared", lastSeen: "3 hours")
            try Self.device(db, owner: "c2", token: "shared", id: "c2-shared", lastSeen: "2 hours")
            try Self.device(db, owner: "c1", token: "own-1", id: "c1-own", lastSeen: "5 hours")
            try Self.device(db, owner: "c2", token: "own-2", id: "c2-own", lastSeen: "5 hours")
            try Self.device(db, owner: "c3", token: "own-3", id: "c3-own", lastSeen: "5 hours")
            try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            #expect(sender.pushes.map(\.token).sorted() == ["own-1", "own-2", "own-3", "shared"])
            #expect(try db.deliveries().map(\.device) == ["c1-own", "c2-own", "c2-shared", "c3-own"])
            // Now c3 registers "shared" (newest) and switches pushes off there: the phone gets nothing.
            try Self.device(db, owner: "c3", token: "shared", id: "c3-shared", lastSeen: "1 minute", enabled: false)
            try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "group-2"))
            try await makeWorker(conninfo, sender: sender).0.drain()
            #expect(sender.pushes.filter { $0.eventKey == "doseTaken:group-2" }.map(\.token).sorted() == ["own-1", "own-2", "own-3"])
        }
    }

    /// Two patients' events that carry the same `recordingGroupId`, inserted together: each patient's caregiver gets
    /// their own patient's push, nobody else's, and both events are DONE with their own deliveries.
    @Test func twoPatientsSharingARecordingGroupId_inOneClaim_eachGetsTheirOwnPush() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1", name: "一郎")
            try db.patient("p2", name: "二郎")
            try db.link(caregiver: "c1", patient: "p1")
            try db.link(caregiver: "c2", patient: "p2")
            try db.device(owner: "c1", token: "token-c1", id: "d1")
            try db.device(owner: "c2", token: "token-c2", id: "d2")
            let ids = [try db.enqueue(patient: "p1", payload: Fixtures.payload(slot: "morning", group: "shared-group")),
                       try db.enqueue(patient: "p2", payload: Fixtures.payload(slot: "evening", group: "shared-group"))]
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            let pushes = sender.pushes.sorted { $0.token < $1.token }
            #expect(pushes.map { "\($0.token) \($0.patientId) \($0.displayName) \($0.slot)" }
                == ["token-c1 p1 一郎 morning", "token-c2 p2 二郎 evening"])
            for id in ids { #expect(try db.eventStatus(id).status == .done) }
            let owners = try db.connection.query(#"SELECT "pushDeviceId", "patientId", status FROM "PushDelivery" ORDER BY 1"#)
                .map { "\(try $0["pushDeviceId"].string()) \(try $0["patientId"].string()) \(try $0["status"].string())" }
            #expect(owners == ["d1 p1 SENT", "d2 p2 SENT"])
        }
    }

    /// Across claims: the first patient's delivery waits for its retry when the second patient's event with the same key
    /// arrives, and the second patient's caregiver has no device (so its fan-out looks for earlier deliveries of the
    /// key). The second event neither takes the first one's delivery over nor sends it with its own name; the retry
    /// goes out later with the first patient's name and dose.
    @Test func twoPatientsSharingARecordingGroupId_acrossClaims_aRetryKeepsItsOwnPatient() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1", name: "一郎")
            try db.patient("p2", name: "二郎")
            try db.link(caregiver: "c1", patient: "p1")
            try db.link(caregiver: "c2", patient: "p2")
            try db.device(owner: "c1", token: "token-c1", id: "d1")
            let first = try db.enqueue(patient: "p1", payload: Fixtures.payload(slot: "morning", group: "shared-group"))
            let unavailable = FakeSender { _ in .retry(reason: "UNAVAILABLE", after: nil, minimumBackoff: nil) }
            try await makeWorker(conninfo, sender: unavailable).0.drain()
            #expect(try db.eventStatus(first).status == .pending)
            let second = try db.enqueue(patient: "p2", payload: Fixtures.payload(slot: "evening", group: "shared-group"))
            let sender = FakeSender()
            let (worker, _, _) = makeWorker(conninfo, sender: sender)
            try await worker.drain()
            #expect(sender.pushes.isEmpty)
            #expect(try db.eventStatus(second).status == .done)
            #expect(try db.eventStatus(first).status == .pending)  // its own retry is still ahead
            try db.connection.query(#"UPDATE "PushOutbox" SET "availableAt" = now() WHERE id = \#(Int(first))"#)
            try await worker.drain()
            #expect(sender.pushes.map { "\($0.token) \($0.patientId) \($0.displayName) \($0.slot)" } == ["token-c1 p1 一郎 morning"])
            #expect(try db.eventStatus(first).status == .done)
        }
    }

    /// Patient p1's caregiver c1 has one device (token "phone"); p1's event is answered 503 once, `change` happens while
    /// its delivery waits for the retry, and the retry is due: nothing may be sent, the delivery ends FAILED with `reason`
    /// and the event is DONE.
    static func expectRetryNotSent(after change: PostgresQuery, reason: String) async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            try device(db, owner: "c1", token: "phone", id: "c1-phone", lastSeen: "1 day")
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let unavailable = FakeSender { _ in .retry(reason: "UNAVAILABLE", after: nil, minimumBackoff: nil) }
            try await makeWorker(conninfo, sender: unavailable).0.drain()
            #expect(try db.eventStatus(id).status == .pending)
            try db.connection.query(change)
            try db.connection.query(#"UPDATE "PushOutbox" SET "availableAt" = now()"#)
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            #expect(sender.pushes.isEmpty)
            #expect(try db.eventStatus(id).status == .done)
            let row = try db.connection.query(#"SELECT status, "lastError" FROM "PushDelivery""#)[0]
            #expect(try row["status"].decode(DeliveryStatus.self) == .failed)
            #expect(row["lastError"].optionalString() == reason)
        }
    }

    /// The patient revoked the caregiver while the delivery waited for its retry (FCM was down).
    @Test func aLinkRevokedWhileADeliveryWaits_theRetryIsNotSent() async throws {
        try await Self.expectRetryNotSent(after: #"UPDATE "CaregiverPatientLink" SET status = \#(literal: LinkStatus.revoked) WHERE "caregiverId" = 'c1'"#,
                                          reason: EventFate.linkNotActiveBeforeSend)
    }

    /// The phone changed hands while the delivery waited for its retry: it does not reach the new owner.
    @Test func aTokenTakenOverWhileADeliveryWaits_theRetryIsNotSent() async throws {
        try await Self.expectRetryNotSent(after: #"""
            INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt")
            VALUES ('stranger-phone', \#(literal: OwnerType.caregiver), 'stranger', 'phone', 'ios', 'PROD', true, now())
            """#, reason: EventFate.tokenSupersededBeforeSend)
    }

    /// The cutover (SPEC §2.2): an old API instance still sends inline and inserts its delivery row with the seed's
    /// columns only. The worker never sends that device's push again when the outbox event with the same key arrives,
    /// leaves the row as it was written, and never counts it as pending.
    @Test func aRowTheInlineSenderWrote_isNeverSentAgainNorPending() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: [])
            try db.device(owner: "c1", token: "token-inline", id: "d-inline")
            try db.device(owner: "c1", token: "token-other", id: "d-other")
            // The seed's tryInsertDelivery: only the seed's columns.
            try db.connection.query(#"""
                INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", "createdAt") VALUES ('inline-1', 'doseTaken:group-1', 'd-inline', now()),
                    ('inline-2', 'doseTaken:no-outbox-event', 'd-inline', now())
                """#)
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            #expect(sender.pushes.map(\.token) == ["token-other"])
            #expect(try db.eventStatus(id).status == .done)
            let inline = try db.connection.query(#"""
                SELECT id, status, attempts, "sentAt" IS NULL AS unsent, "lastError", "patientId", "leaseToken" IS NULL AS unleased
                FROM "PushDelivery" WHERE id LIKE 'inline-%' ORDER BY id
                """#)
            for row in inline {
                #expect(try row["status"].decode(DeliveryStatus.self) == .sent)
                #expect(try row["attempts"].int() == 0)
                #expect(try row["unsent"].bool() && row["lastError"].isNull && row["patientId"].isNull && row["unleased"].bool())
            }
            #expect(try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.pending)"#)[0]["n"].int() == 0)
        }
    }
}
