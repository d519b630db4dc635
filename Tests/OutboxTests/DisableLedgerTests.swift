import Foundation
import JSON
import OperatorCommands
import Outbox
import Postgres
import Push
import TestSupport
import Testing

/// Every disable is recorded in `"PushDeviceDisabled"` by the statement that disables, and `devices enable` undoes
/// exactly the disables nobody changed since; `resend` then reaches the device again through the engine.
@Suite("Disable ledger", .serialized, .blockingFixtures)
struct DisableLedgerTests {
    @Test func disable_isRecorded_enableUndoesIt_butLeavesAReregisteredDeviceAlone() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            try db.device(owner: "c1", token: "wrongly-called-dead-1", id: "d-1")
            try db.device(owner: "c1", token: "wrongly-called-dead-2", id: "d-2")
            try db.device(owner: "c1", token: "healthy", id: "d-3")
            let dead = FakeSender { push in
                push.token.hasPrefix("wrongly") ? .tokenInvalid(.senderIdMismatch) : .sent(messageName: "projects/p/messages/1")
            }
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            try await makeWorker(conninfo, sender: dead).0.drain()
            #expect(try db.eventStatus(id).status == .done)

            let ledger = try db.connection.query("""
                SELECT l."pushDeviceId" AS device, l.reason, l."eventKey" AS key, l."lastError" AS err, l."disabledAt" = d."updatedAt" AS same
                FROM "PushDeviceDisabled" l JOIN "PushDevice" d ON d.id = l."pushDeviceId" ORDER BY 1
                """)
            #expect(try ledger.map { try $0["device"].string() } == ["d-1", "d-2"])
            #expect(try ledger.allSatisfy { try $0["reason"].string() == "SENDER_ID_MISMATCH" && $0["key"].optionalString() != nil })
            #expect(try ledger.allSatisfy { try $0["same"].bool() })

            let environment = ["DATABASE_URL": conninfo]
            let devices = try #require(CommandRunner.command(named: "devices"))
            let listed = await CommandRunner.execute(devices, arguments: ["disabled", "--reason", "SENDER_ID_MISMATCH", "--json"], environment: environment)
            #expect(JSONValue.parse(listed.output)?["disabled"]?.arrayValue?.compactMap { $0["pushDeviceId"]?.stringValue }.sorted() == ["d-1", "d-2"])

            // The app re-registers d-2 before the operator undoes the disable: the API's update is newer than the disable.
            try db.connection.query(#"UPDATE "PushDevice" SET "updatedAt" = now() + interval '1 second', "lastSeenAt" = now() WHERE id = 'd-2'"#)
            let preview = await CommandRunner.execute(devices, arguments: ["enable", "--since", "1h", "--dry-run", "--json"], environment: environment)
            #expect(JSONValue.parse(preview.output)?["enabled"] == .array([.string("d-1")]))
            #expect(try db.connection.query(#"SELECT count(*) AS n FROM "PushDevice" WHERE "isEnabled""#)[0]["n"].int() == 1)

            let enabled = await CommandRunner.execute(devices, arguments: ["enable", "--since", "1h"], environment: environment)
            #expect(enabled.status == 0)
            #expect(enabled.output.contains("re-enabled 1 device(s) disabled within 60m: d-1"))
            #expect(enabled.output.contains("d-2: changed since the disable"))
            let states = try db.connection.query(#"SELECT id, "isEnabled" FROM "PushDevice" ORDER BY id"#).map { "\(try $0["id"].string())=\(try $0["isEnabled"].bool())" }
            #expect(states == ["d-1=true", "d-2=false", "d-3=true"])
            let restored = try db.connection.query(#"SELECT "pushDeviceId" AS d FROM "PushDeviceDisabled" WHERE "restoredAt" IS NOT NULL"#)
            #expect(try restored.map { try $0["d"].string() } == ["d-1"])

            // The delivery that was FAILED by the wrong disable goes out once resent.
            let resend = try #require(CommandRunner.command(named: "resend"))
            let resent = await CommandRunner.execute(resend, arguments: ["--event", "\(id)", "--json"], environment: environment)
            #expect(resent.status == 0)
            #expect(JSONValue.parse(resent.output)?["resent"]?.arrayValue?.count == 1)
            #expect(JSONValue.parse(resent.output)?["skipped"]?.arrayValue?.count == 1)  // d-2 stays disabled
            try await makeWorker(conninfo, sender: FakeSender()).0.drain()
            #expect(try db.eventStatus(id).status == .done)
            let deliveries = try db.connection.query(#"SELECT "pushDeviceId" AS d, status FROM "PushDelivery" ORDER BY 1"#)
                .map { "\(try $0["d"].string())=\(try $0["status"].string())" }
            #expect(deliveries == ["d-1=SENT", "d-2=FAILED", "d-3=SENT"])
            // Enabling again finds nothing left to undo in the window.
            let nothing = await CommandRunner.execute(devices, arguments: ["enable", "--since", "1h", "--json"], environment: environment)
            #expect(JSONValue.parse(nothing.output)?["enabled"] == .array([]))
        }
    }
}
