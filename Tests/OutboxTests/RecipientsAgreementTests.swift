import Foundation
import Outbox
import Postgres
import TestSupport
import Testing

/// One recipients rule (`Recipients.refusal`): the fragment over a table of devices.
@Suite("Who gets the push: one rule", .blockingFixtures)
struct RecipientsAgreementTests {
    /// The fragment over a table of device rows (a missing one as a LEFT JOIN leaves it): its code per case, the first
    /// check that fails when several do.
    @Test func refusal_perDevice_theFirstCheckThatFails() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            for (caregiver, status) in [("c-ok", "ACTIVE"), ("c-revoked", "REVOKED"), ("c-both", "REVOKED")] {
                try db.link(caregiver: caregiver, patient: "p1", status: status)
            }
            try db.link(caregiver: "c-twice", patient: "p1", status: "REVOKED")
            try db.link(caregiver: "c-twice", patient: "p1")  // one ACTIVE link of several is enough
            try RecipientsTests.device(db, owner: "c-ok", token: "t-ok", id: "ok", lastSeen: "1 day")
            try RecipientsTests.device(db, owner: "c-ok", token: "t-off", id: "off", lastSeen: "1 day", enabled: false)
            try RecipientsTests.device(db, owner: "c-revoked", token: "t-revoked", id: "revoked", lastSeen: "1 day")
            try RecipientsTests.device(db, owner: "c-unlinked", token: "t-unlinked", id: "unlinked", lastSeen: "1 day")
            try RecipientsTests.device(db, owner: "c-both", token: "t-both", id: "off-and-revoked", lastSeen: "1 day", enabled: false)
            try RecipientsTests.device(db, owner: "c-twice", token: "t-twice", id: "twice", lastSeen: "1 day")
            try RecipientsTests.device(db, owner: "c-ok", token: "t-handed", id: "handed", lastSeen: "1 day")
            try RecipientsTests.device(db, owner: "stranger", token: "t-handed", id: "stranger", lastSeen: "1 minute", enabled: false)
            try RecipientsTests.device(db, owner: "c-revoked", token: "t-ok-2", id: "revoked-and-handed", lastSeen: "1 day")
            try RecipientsTests.device(db, owner: "stranger", token: "t-ok-2", id: "stranger-2", lastSeen: "1 minute")
            try db.connection.query(#"""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt")
                VALUES ('patients-own', 'PATIENT', 'c-ok', 't-patient', 'ios', 'PROD', true, now())
                """#)
            let expected: [(String, Recipients.Refusal?)] = [
                ("ok", nil), ("off", .deviceDisabled), ("revoked", .linkNotActive), ("unlinked", .linkNotActive),
                ("off-and-revoked", .deviceDisabled), ("twice", nil), ("handed", .tokenSuperseded), ("revoked-and-handed", .linkNotActive),
                ("patients-own", .linkNotActive), ("gone", .deviceDeleted),
            ]
            let rows = try db.connection.query("""
                SELECT v.id, \(sql: Recipients.refusal(device: "d", patient: "\("p1")")) AS refusal, \(sql: Recipients.refusal(patient: "'p1'")) IS NULL AS recipient
                FROM unnest(\(expected.map(\.0))::text[]) WITH ORDINALITY AS v(id, ord) LEFT JOIN "PushDevice" d ON d.id = v.id
                ORDER BY v.ord
                """)
            #expect(try rows.map { try $0["id"].string() } == expected.map(\.0))
            for (row, (id, refusal)) in zip(rows, expected) {
                #expect(try Recipients.refusal(row["refusal"]) == refusal, "\(id)")
                #expect(try row["recipient"].bool() == (refusal == nil), "\(id)")
            }
        }
    }
}
