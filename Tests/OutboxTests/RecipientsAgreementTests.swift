import Foundation
import JSON
import OperatorCommands
import Outbox
import Postgres
import TestSupport
import Testing

/// One recipients rule (`Recipients.refusal`): the fragment over a table of devices, and the fan-out, `resend`,
/// `event` and `events --patient` judging the same devices the same way.
@Suite("Who gets the push: one rule", .blockingFixtures)
struct RecipientsAgreementTests {
    /// Patient p1's caregivers and devices, each last seen a day ago: `kept` stays a recipient; `handed` changes hands,
    /// `revoked` loses its link, `off` is switched off, `both` both (`change`): the rule's first check that fails names it.
    static let devices: [(caregiver: String, device: String, expected: Recipients.Refusal?)] = [
        ("c-kept", "kept", nil), ("c-handed", "handed", .tokenSuperseded), ("c-revoked", "revoked", .linkNotActive), ("c-off", "off", .deviceDisabled),
        ("c-both", "both", .deviceDisabled),
    ]

    static let change: [PostgresQuery] = [
        #"""
        INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt")
        VALUES ('stranger-phone', \#(literal: OwnerType.caregiver), 'stranger', 'phone-handed', 'ios', 'PROD', true, now())
        """#,
        #"UPDATE "CaregiverPatientLink" SET status = \#(literal: LinkStatus.revoked) WHERE "caregiverId" IN ('c-revoked', 'c-both')"#,
        #"UPDATE "PushDevice" SET "isEnabled" = false, "updatedAt" = now() WHERE id IN ('off', 'both')"#,
    ]

    /// The fragment over a table of device rows (a missing one as a LEFT JOIN leaves it): its code per case, the first
    /// check that fails when several do.
    @Test func refusal_perDevice_theFirstCheckThatFails() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            for (caregiver, status) in [("c-ok", LinkStatus.active), ("c-revoked", .revoked), ("c-both", .revoked)] {
                try db.link(caregiver: caregiver, patient: "p1", status: status)
            }
            try db.link(caregiver: "c-twice", patient: "p1", status: .revoked)
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
                VALUES ('patients-own', \#(literal: OwnerType.patient), 'c-ok', 't-patient', 'ios', 'PROD', true, now())
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

    /// A phone that changed hands, a revoked link and a switched-off device, after a first attempt left each device a
    /// PENDING delivery (FCM down) and a second event a FAILED one: a new event's fan-out sends only to the device still
    /// a recipient and skips the handed-over one for its token; the retry sends the same and fails the others with the
    /// rule's reason; `resend`, `event` and `events --patient` say the same of each device.
    @Test func fanOutResendAndEvent_agreeOnAPhoneThatChangedHandsARevokedLinkAndADisabledDevice() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            for (caregiver, device, _) in Self.devices {
                try db.link(caregiver: caregiver, patient: "p1")
                try RecipientsTests.device(db, owner: caregiver, token: "phone-\(device)", id: device, lastSeen: "1 day")
            }
            let waiting = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "waiting"))
            try await makeWorker(conninfo, sender: FakeSender { _ in .retry(reason: "UNAVAILABLE", after: nil, minimumBackoff: nil) }).0.drain()
            let failed = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "failed"))
            #expect(try await makeWorker(conninfo, sender: FakeSender { _ in .permanentFailure(reason: "THIRD_PARTY_AUTH_ERROR") }).0.drain() == 1)
            for query in Self.change { try db.connection.query(query) }

            let fresh = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "fresh"))
            try db.connection.query(#"UPDATE "PushOutbox" SET "availableAt" = now() WHERE id = \#(waiting)"#)
            let sender = FakeSender()
            let (worker, metrics, _) = makeWorker(conninfo, sender: sender)
            #expect(try await worker.drain() == 2)
            let recipients = Self.devices.filter { $0.expected == nil }.map { "phone-" + $0.device }
            #expect(sender.pushes.filter { $0.eventKey == "doseTaken:fresh" }.map(\.token) == recipients)
            #expect(sender.pushes.filter { $0.eventKey == "doseTaken:waiting" }.map(\.token) == recipients)
            // The handed-over phone, skipped by both events' fan-outs (the retried one's too), neither sent nor failed there.
            #expect(metrics.value("push_recipients_skipped_total", labels: ["reason": "token_superseded"]) == 2)

            let verdicts = try await Self.verdicts(conninfo, db, failed: failed, fresh: fresh)
            #expect(Set(verdicts.keys) == ["retry", "resend", "events"])
            for (_, device, expected) in Self.devices {
                for (path, verdict) in verdicts { #expect(verdict[device] == Self.verdict(expected), "\(path) on \(device)") }
            }
            // `event` lists as skipped exactly the device the fan-out skipped for its token.
            let event = await Self.run(conninfo, "event", "\(fresh)")
            #expect(event?["skipped"]?.arrayValue?.compactMap { $0["pushDeviceId"]?.stringValue } == ["handed"])
            #expect(event?["deliveries"]?.arrayValue?.compactMap { $0["pushDeviceId"]?.stringValue } == ["kept"])
        }
    }

    /// A verdict as the agreement compares it: `recipient`, or the refusal's code.
    static func verdict(_ refusal: Recipients.Refusal?) -> String { refusal?.rawValue ?? "recipient" }

    /// Each path's verdict per device: the retry's FAILED reasons (the waiting event's deliveries), `resend --dry-run`'s
    /// skips (the failed event's), `events --patient`'s fates of the fresh event. A reason no refusal gives reads as itself.
    static func verdicts(_ conninfo: String, _ db: Fixtures, failed: Int64, fresh: Int64) async throws -> [String: [String: String]] {
        var verdicts: [String: [String: String]] = [:]
        let deliveries = try db.connection.query(#"SELECT id, "eventKey" AS key, "pushDeviceId" AS device, status, "lastError" FROM "PushDelivery""#)
        var devices: [String: String] = [:]
        for row in deliveries {
            devices[try row["id"].string()] = try row["device"].string()
            guard try row["key"].string() == "doseTaken:waiting" else { continue }
            let reason = row["lastError"].optionalString() ?? "-"
            let refusal = [Recipients.Refusal.deviceDisabled, .linkNotActive, .tokenSuperseded].first { EventFate.notSent($0) == reason }
            verdicts["retry", default: [:]][try row["device"].string()] = try row["status"].decode(DeliveryStatus.self) == .sent ? verdict(nil) : refusal?.rawValue ?? reason
        }
        let resend = await run(conninfo, "resend", "--event", "\(failed)", "--dry-run")
        for id in resend?["resent"]?.arrayValue?.compactMap(\.stringValue) ?? [] { verdicts["resend", default: [:]][devices[id] ?? id] = verdict(nil) }
        for skip in resend?["skipped"]?.arrayValue ?? [] {
            let reason = skip["reason"]?.stringValue ?? "-"
            let refusal = Recipients.Refusal.allCases.first { EventFate.resend(eventAgeSeconds: 0, maxAge: .seconds(86_400), refusal: $0) == .skip(reason: reason) }
            verdicts["resend", default: [:]][devices[skip["id"]?.stringValue ?? ""] ?? "?"] = refusal?.rawValue ?? reason
        }
        let events = await run(conninfo, "events", "--patient", "p1")
        let freshEvent = events?["events"]?.arrayValue?.first { $0["event"]?["id"] == .number(Double(fresh)) }
        let codes: [String: Recipients.Refusal] = ["switched_off": .deviceDisabled, "link_not_active": .linkNotActive, "token_superseded": .tokenSuperseded]
        for device in freshEvent?["devices"]?.arrayValue ?? [] {
            let reason = device["reason"]?.stringValue ?? "-"
            verdicts["events", default: [:]][device["pushDeviceId"]?.stringValue ?? "?"] =
                device["outcome"]?.stringValue == "SENT" ? verdict(nil) : codes[reason]?.rawValue ?? reason
        }
        return verdicts
    }

    /// `medication-worker NAME ARGS… --json` against the test database, parsed.
    static func run(_ conninfo: String, _ name: String, _ arguments: String...) async -> JSONValue? {
        guard let command = CommandRunner.command(named: name) else { return nil }
        let result = await CommandRunner.execute(command, arguments: arguments + ["--json"], environment: ["DATABASE_URL": conninfo])
        return JSONValue.parse(result.output)
    }
}
