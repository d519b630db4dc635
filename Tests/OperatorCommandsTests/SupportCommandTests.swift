import Foundation
import JSON
import OperatorCommands
import Outbox
import Postgres
import TestSupport
import Testing

/// "My phone did not show mother's 8 o'clock dose" (SPEC §5 "Support", issue 56): `events --caregiver`,
/// `events --patient` and `devices --owner` as an operator runs them, under the least-privilege role of sql/roles.sql,
/// in text and `--json`. The stack: caregiver c1 of two patients (p1, p2) with three registrations: a phone pushed to,
/// an old phone now registered by caregiver cb (superseded), and a tablet the worker disabled and an operator restored;
/// caregiver c2's link to p1 is REVOKED.
@Suite("Operator commands: why no push (support)", .blockingFixtures)
struct SupportCommandTests {
    struct Stack {
        var rig: CommandRig
        var worker: String
        /// Events: p1 four hours ago (while the tablet was disabled), p2 an hour ago (after the restore), p1 30 hours ago.
        var mother: Int64, father: Int64, older: Int64

        func run(_ name: String, _ arguments: String...) async throws -> CommandRunner.Result {
            guard let type = CommandRunner.command(named: name) else { throw TestSupportError("no command \(name)") }
            return await CommandRunner.execute(type, arguments: arguments, environment: ["DATABASE_URL": worker])
        }

        func json(_ name: String, _ arguments: String...) async throws -> (status: Int32, json: JSONValue) {
            guard let type = CommandRunner.command(named: name) else { throw TestSupportError("no command \(name)") }
            let result = await CommandRunner.execute(type, arguments: arguments + ["--json"], environment: ["DATABASE_URL": worker])
            guard let json = JSONValue.parse(result.output) else { throw TestSupportError("not JSON: \(result.output) \(result.errorOutput)") }
            return (result.status, json)
        }
    }

    static func withStack(_ body: (Stack) async throws -> Void) async throws {
        try await TestDatabase.withMigratedDatabase { owner in
            let rig = try CommandRig(owner)
            let db = rig.connection
            try db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', 'Mother'), ('p2', 'Father')"#)
            try db.query(#"""
                INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES
                    ('l1', 'c1', 'p1', \#(literal: LinkStatus.active)), ('l2', 'c1', 'p2', \#(literal: LinkStatus.active)), ('l3', 'c2', 'p1', \#(literal: LinkStatus.revoked))
                """#)
            try db.query(#"""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, "isEnabled", "lastSeenAt", "createdAt", "updatedAt") VALUES
                    ('phone-new', \#(literal: OwnerType.caregiver), 'c1', 'tokenA-the-new-phone-secret-AAAAAA', true, now() - interval '1 hour', now() - interval '30 days', now() - interval '30 days'),
                    ('phone-old', \#(literal: OwnerType.caregiver), 'c1', 'tokenB-the-old-phone-secret-BBBBBB', true, now() - interval '10 days', now() - interval '60 days', now() - interval '60 days'),
                    ('b-row', \#(literal: OwnerType.caregiver), 'cb', 'tokenB-the-old-phone-secret-BBBBBB', true, now() - interval '2 hours', now() - interval '2 hours', now() - interval '2 hours'),
                    ('tablet', \#(literal: OwnerType.caregiver), 'c1', 'tokenC-the-tablet-secret-CCCCCCCCC', true, now() - interval '3 days', now() - interval '90 days', now() - interval '2 hours'),
                    ('c2-phone', \#(literal: OwnerType.caregiver), 'c2', 'tokenD-revoked-caregiver-DDDDDDDD', true, now() - interval '1 day', now() - interval '40 days', now() - interval '40 days')
                """#)
            // The worker disabled the tablet five hours ago (witnessed); an operator restored it two hours ago.
            try db.query(#"""
                INSERT INTO "PushDeviceDisabled" (id, "pushDeviceId", reason, "eventKey", "lastError", "disabledAt", "restoredAt", witnessed)
                VALUES ('ledger-1', 'tablet', 'UNREGISTERED', 'doseTaken:earlier', '404 UNREGISTERED: Requested entity was not found.',
                        now() - interval '5 hours', now() - interval '2 hours', true)
                """#)
            func event(_ patient: String, _ key: String, hoursAgo: Double) throws -> Int64 {
                try Int64(db.query("""
                    INSERT INTO "PushOutbox" ("eventType", "patientId", payload, "createdAt", status, "eventKey", "processedAt", attempts)
                    VALUES ('DOSE_TAKEN', \(patient), '{"date":"2026-02-11","slot":"morning","withinTime":true,"isPrn":false,"takenAt":"2026-02-11T08:03:27+09:00"}',
                            now() - make_interval(secs => \(hoursAgo * 3600)::double precision), \(literal: OutboxStatus.done), \(key),
                            now() - make_interval(secs => \(hoursAgo * 3600 - 5)::double precision), 1)
                    RETURNING id
                    """)[0]["id"].int())
            }
            let mother = try event("p1", "doseTaken:m1", hoursAgo: 4)
            let father = try event("p2", "doseTaken:f1", hoursAgo: 1)
            let older = try event("p1", "doseTaken:m0", hoursAgo: 30)
            try db.query(#"""
                INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", "patientId", status, attempts, "createdAt", "sentAt", "fcmMessageId") VALUES
                    ('del-m1', 'doseTaken:m1', 'phone-new', 'p1', \#(literal: DeliveryStatus.sent), 1, now() - interval '4 hours', now() - interval '4 hours', 'projects/p/messages/m1'),
                    ('del-f1', 'doseTaken:f1', 'phone-new', 'p2', \#(literal: DeliveryStatus.sent), 1, now() - interval '1 hour', now() - interval '1 hour', 'projects/p/messages/f1'),
                    ('del-f1-tablet', 'doseTaken:f1', 'tablet', 'p2', \#(literal: DeliveryStatus.sent), 1, now() - interval '1 hour', now() - interval '1 hour', 'projects/p/messages/f1t'),
                    ('del-m0', 'doseTaken:m0', 'phone-new', 'p1', \#(literal: DeliveryStatus.failed), 1, now() - interval '30 hours', NULL, NULL)
                """#)
            try db.query(#"UPDATE "PushDelivery" SET "lastError" = 'THIRD_PARTY_AUTH_ERROR: APNs certificate' WHERE id = 'del-m0'"#)
            try await LeastPrivilegeRole.with(owner: owner) { worker in
                try await body(Stack(rig: rig, worker: worker, mother: mother, father: father, older: older))
            }
        }
    }

    /// The devices of one listed event, by id: (outcome, reason).
    static func fates(_ event: JSONValue?) -> [String: String] {
        var fates: [String: String] = [:]
        for device in event?["devices"]?.arrayValue ?? [] {
            fates[device["pushDeviceId"]?.stringValue ?? "?"] = "\(device["outcome"]?.stringValue ?? "?") \(device["reason"]?.stringValue ?? "-")"
        }
        return fates
    }

    @Test func eventsCaregiver_listsBothPatientsEvents_withEachDevicesFate() async throws {
        try await Self.withStack { stack in
            let result = try await stack.json("events", "--caregiver", "c1")
            #expect(result.status == 0)
            #expect(result.json["caregiverId"] == .string("c1"))
            #expect(result.json["patients"] == .array([.string("p1"), .string("p2")]))
            let events = try #require(result.json["events"]?.arrayValue)
            // Newest first; the one 30 hours old is outside the default 24h.
            #expect(events.map { $0["event"]?["id"] } == [.number(Double(stack.father)), .number(Double(stack.mother))])
            #expect(Self.fates(events[1]) == [
                "phone-new": "SENT -", "phone-old": "SKIPPED token_superseded", "tablet": "NO_DELIVERY device_disabled",
            ])
            #expect(Self.fates(events[0]) == ["phone-new": "SENT -", "phone-old": "SKIPPED token_superseded", "tablet": "SENT -"])
            let old = events[1]["devices"]?.arrayValue?.first { $0["pushDeviceId"] == .string("phone-old") }
            #expect(old?["newestRegistration"]?["pushDeviceId"] == .string("b-row"))
            #expect(old?["newestRegistration"]?["ownerId"] == .string("cb"))
            #expect(old?["token"] == .string("tokenB…BBBBBB"))
            let tablet = events[1]["devices"]?.arrayValue?.first { $0["pushDeviceId"] == .string("tablet") }
            #expect(tablet?["disable"]?["reason"] == .string("UNREGISTERED"))
            #expect(tablet?["disable"]?["restoredAt"]?.stringValue != nil)
            #expect(tablet?["disable"]?["witnessed"] == .bool(true))

            let text = try await stack.run("events", "--caregiver", "c1")
            #expect(text.status == 0)
            #expect(text.output.contains("caregiver c1: linked to patient(s) p1, p2"), "\(text.output)")
            #expect(text.output.contains("2 event(s) of caregiver c1 created within 24.0h"), "\(text.output)")
            #expect(text.output.contains("event \(stack.mother)  "))
            #expect(text.output.contains("device tablet  tokenC…CCCCCC  of c1  no delivery: the device was disabled at "))
            #expect(text.output.contains("(UNREGISTERED, witnessed), restored at "))
            #expect(text.output.contains("device phone-old  tokenB…BBBBBB  of c1  skipped: superseded by another registration of this phone: device b-row of cb, last seen "))
            #expect(text.output.contains("device phone-new  tokenA…AAAAAA  of c1  SENT at "))
            #expect(!text.output.contains("the-new-phone-secret"))  // tokens stay masked

            // --since widens the window: the FAILED delivery of 30 hours ago, and why.
            let wider = try await stack.json("events", "--caregiver", "c1", "--since", "2d", "--limit", "3")
            let oldest = try #require(wider.json["events"]?.arrayValue?.last)
            #expect(oldest["event"]?["id"] == .number(Double(stack.older)))
            let failed = oldest["devices"]?.arrayValue?.first { $0["pushDeviceId"] == .string("phone-new") }
            #expect(failed?["outcome"] == .string("FAILED"))
            #expect(failed?["delivery"]?["lastError"] == .string("THIRD_PARTY_AUTH_ERROR: APNs certificate"))
        }
    }

    @Test func eventsPatient_showsEveryCaregiversDevice_includingARevokedLink() async throws {
        try await Self.withStack { stack in
            let result = try await stack.json("events", "--patient", "p1")
            #expect(result.status == 0)
            #expect(result.json["patientId"] == .string("p1"))
            let events = try #require(result.json["events"]?.arrayValue)
            #expect(events.map { $0["event"]?["id"] } == [.number(Double(stack.mother))])
            #expect(Self.fates(events[0]) == [
                "phone-new": "SENT -", "phone-old": "SKIPPED token_superseded", "tablet": "NO_DELIVERY device_disabled",
                "c2-phone": "SKIPPED link_not_active",
            ])
            let text = try await stack.run("events", "--patient", "p1")
            #expect(text.output.contains("1 event(s) of patient p1 created within 24.0h"), "\(text.output)")
            #expect(text.output.contains("device c2-phone  tokenD…DDDDDD  of c2  skipped: the caregiver's link to patient p1 is REVOKED, not ACTIVE"))
        }
    }

    @Test func devicesOwner_listsEachRegistrationWithLastSeenSentDisableAndSuperseding() async throws {
        try await Self.withStack { stack in
            let result = try await stack.json("devices", "--owner", "c1")
            #expect(result.status == 0)
            let devices = try #require(result.json["devices"]?.arrayValue)
            // Most recently seen first.
            #expect(devices.map { $0["pushDeviceId"] } == [.string("phone-new"), .string("tablet"), .string("phone-old")])
            let byId = Dictionary(uniqueKeysWithValues: devices.map { ($0["pushDeviceId"]?.stringValue ?? "", $0) })
            #expect(byId["phone-new"]?["lastSent"]?["eventKey"] == .string("doseTaken:f1"))
            #expect(byId["phone-new"]?["speaksForToken"] == .bool(true))
            #expect(byId["phone-new"]?["lastDisable"] == .null)
            #expect(byId["tablet"]?["isEnabled"] == .bool(true))
            #expect(byId["tablet"]?["lastDisable"]?["reason"] == .string("UNREGISTERED"))
            #expect(byId["tablet"]?["lastDisable"]?["lastError"] == .string("404 UNREGISTERED: Requested entity was not found."))
            #expect(byId["tablet"]?["lastDisable"]?["witnessed"] == .bool(true))
            #expect(byId["tablet"]?["lastDisable"]?["restoredAt"]?.stringValue != nil)
            #expect(byId["phone-old"]?["speaksForToken"] == .bool(false))
            #expect(byId["phone-old"]?["newestRegistration"]?["pushDeviceId"] == .string("b-row"))
            #expect(byId["phone-old"]?["lastSent"] == .null)
            #expect(byId["phone-old"]?["token"] == .string("tokenB…BBBBBB"))

            let text = try await stack.run("devices", "--owner", "c1")
            #expect(text.status == 0)
            #expect(text.output.contains("caregiver c1: 3 registration(s)"), "\(text.output)")
            #expect(text.output.contains("device tablet  tokenC…CCCCCC  enabled  last seen "))
            #expect(text.output.contains(" UNREGISTERED, witnessed; FCM said: 404 UNREGISTERED: Requested entity was not found.; restored at "))
            #expect(text.output.contains("superseded: device b-row of cb, last seen "))
            #expect(text.output.contains("last sent:    never (no SENT delivery kept)"))
            #expect(!text.output.contains("the-tablet-secret"))

            // The existing subcommands still work beside --owner.
            let disabled = try await stack.json("devices", "disabled")
            #expect(disabled.status == 0)
            #expect(disabled.json["disabled"]?.arrayValue?.map { $0["pushDeviceId"] } == [.string("tablet")])
            #expect(try await stack.json("devices", "enable", "--since", "1d", "--dry-run").status == 0)
        }
    }

    /// A device id is the client app's: `devices enable` lists the ids it re-enables escaped, as every other line does.
    @Test func hostileDeviceId_devicesEnable_listsItEscaped() async throws {
        try await Self.withStack { stack in
            try stack.rig.connection.query(#"""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, "isEnabled", "lastSeenAt", "createdAt", "updatedAt")
                VALUES (E'dev\nFORGED line\u001b[2J', \#(literal: OwnerType.caregiver), 'c1', 'tokenE-hostile-EEEEEEEE', false, now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour')
                """#)
            try stack.rig.connection.query(#"""
                INSERT INTO "PushDeviceDisabled" (id, "pushDeviceId", reason, "eventKey", "lastError", "disabledAt", witnessed)
                VALUES ('ledger-2', E'dev\nFORGED line\u001b[2J', 'UNREGISTERED', 'doseTaken:x', 'UNREGISTERED', now() - interval '1 hour', true)
                """#)
            let result = try await stack.run("devices", "enable", "--since", "1d", "--dry-run")
            #expect(result.status == 0)
            #expect(result.output.hasPrefix("would re-enable 1 device(s)"), "\(result.output)")
            #expect(result.output.contains(#"dev\nFORGED line\u{1B}[2J"#), "\(result.output)")
            #expect(!result.output.split(separator: "\n").contains { $0.hasPrefix("FORGED") })
            #expect(!result.output.contains("\u{1B}"))
        }
    }

    /// An empty value, or a negative id, is a usage error (64) that says what is missing or names the value, not a
    /// lookup of nothing.
    @Test func emptyValues_andNegativeIds_areUsageErrors() async throws {
        try await Self.withStack { stack in
            for arguments in [["resend", "--delivery", ""], ["devices", "--owner", ""], ["events", "--patient", ""],
                              ["events", "--caregiver", ""], ["event", ""], ["event", "-5"]] {
                let type = try #require(CommandRunner.command(named: arguments[0]))
                let result = await CommandRunner.execute(type, arguments: Array(arguments.dropFirst()), environment: ["DATABASE_URL": stack.worker])
                #expect(result.status == 64, "\(arguments): \(result.status) \(result.errorOutput)")
                #expect(!result.errorOutput.contains("no "), "\(arguments): \(result.errorOutput)")
            }
            let negative = try await stack.run("event", "-5")
            #expect(negative.errorOutput.contains("got -5"), "\(negative.errorOutput)")
        }
    }

    @Test func unknownIds_exit1NamingTheId() async throws {
        try await Self.withStack { stack in
            for (name, arguments, message) in [
                ("events", ["--caregiver", "nobody-c"], "no caregiver has id nobody-c"),
                ("events", ["--patient", "nobody-p"], "no patient has id nobody-p"),
                ("devices", ["--owner", "nobody-o"], "no caregiver has id nobody-o"),
            ] {
                let result = await CommandRunner.execute(try #require(CommandRunner.command(named: name)), arguments: arguments,
                                                         environment: ["DATABASE_URL": stack.worker])
                #expect(result.status == 1)
                #expect(result.errorOutput.contains(message), "\(result.errorOutput)")
                let json = await CommandRunner.execute(try #require(CommandRunner.command(named: name)), arguments: arguments + ["--json"],
                                                       environment: ["DATABASE_URL": stack.worker])
                #expect(json.status == 1)
                #expect(JSONValue.parse(json.output)?["error"]?["message"]?.stringValue?.contains(message) == true, "\(json.output)")
            }
            // A caregiver with a link and no phone is known: listed with no registrations.
            try stack.rig.connection.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l9', 'c9', 'p1', \#(literal: LinkStatus.active))"#)
            let none = try await stack.run("devices", "--owner", "c9")
            #expect(none.status == 0 && none.output == "caregiver c9: 0 registration(s)", "\(none.output)")
            #expect(try await stack.run("events", "--patient", "p1", "--caregiver", "c1").status == 64)
            #expect(try await stack.run("events", "--caregiver", "c1", "--status", "DEAD").status == 64)
            // An id with a control character is printed escaped.
            let escaped = try await stack.run("devices", "--owner", "evil\u{1B}[2J")
            #expect(escaped.status == 1 && escaped.errorOutput.contains("evil\\u{1B}[2J") && !escaped.errorOutput.contains("\u{1B}"))
        }
    }
}
