import Foundation
import JSON
import OperatorCommands
import Outbox
import Postgres
import TestSupport
import Testing
import TextSupport

/// `status`, `event`, `events`, `redrive` and `resend` against the real PostgreSQL: their text, their parsed `--json`,
/// their exit statuses, and what they changed.
@Suite("Operator commands: events", .serialized, .blockingFixtures)
struct OutboxCommandTests {
    @Test func redrive_leavesEventsPastMaxAgeDeadAndSaysSo() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            let old = try rig.event(status: "DEAD", hoursAgo: 30, lastError: "attempts exhausted (10): UNAVAILABLE")
            let new = try rig.event(status: "DEAD", hoursAgo: 2, lastError: "attempts exhausted (10): UNAVAILABLE")

            let preview = try await rig.json("redrive", "--dry-run")
            #expect(preview.status == 0)
            #expect(preview.json["redriven"] == .array([.number(Double(new))]))
            #expect(preview.json["skippedPastMaxAge"] == .array([.number(Double(old))]))
            #expect(preview.json["dryRun"] == .bool(true))
            #expect(try rig.scalar(#"SELECT string_agg(status, ',' ORDER BY id) FROM "PushOutbox""#) == "DEAD,DEAD")

            // Issue 45: without a scope it refuses (a dry run may preview everything).
            let bare = try await rig.json("redrive")
            #expect(bare.status == 64)
            #expect(bare.json["error"]?["message"]?.stringValue?.contains("redrive needs --all, --event ID or --since DURATION") == true)
            #expect(try rig.scalar(#"SELECT string_agg(status, ',' ORDER BY id) FROM "PushOutbox""#) == "DEAD,DEAD")
            #expect(try await rig.json("redrive", "--all", "--since", "1h").status == 64)

            let text = try await rig.run("redrive", "--all")
            #expect(text.status == 0)
            #expect(text.output.contains("redriven 1 event(s): \(new)"))
            #expect(text.output.contains("skipped 1 past EVENT_MAX_AGE (24.0h): \(old)"))
            #expect(try rig.scalar(#"SELECT status FROM "PushOutbox" WHERE id = \#(old)"#) == "DEAD")
            #expect(try rig.scalar(#"SELECT status || ':' || attempts FROM "PushOutbox" WHERE id = \#(new)"#) == "PENDING:0")

            // The one named event that cannot be redriven is a failure, with the reason.
            let one = try await rig.json("redrive", "--event", "\(old)")
            #expect(one.status == 1)
            #expect(one.json["skippedPastMaxAge"] == .array([.number(Double(old))]))
            // A longer EVENT_MAX_AGE makes it redrivable.
            let longer = try await rig.json("redrive", "--event", "\(old)", extra: ["EVENT_MAX_AGE": "48h"])
            #expect(longer.status == 0)
            #expect(longer.json["redriven"] == .array([.number(Double(old))]))
            let notDead = try await rig.json("redrive", "--event", "\(new)")
            #expect(notDead.status == 1)
            #expect(notDead.json["error"]?["message"]?.stringValue?.contains("is PENDING, not DEAD") == true)
        }
    }

    @Test func redrive_since_takesOnlyEventsThatDiedInTheWindow() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            let recent = try rig.event(status: "DEAD", hoursAgo: 1)
            let earlier = try rig.event(status: "DEAD", hoursAgo: 5)
            try rig.connection.query(#"UPDATE "PushOutbox" SET "processedAt" = now() - interval '4 hours' WHERE id = \#(earlier)"#)
            let result = try await rig.json("redrive", "--since", "1h")
            #expect(result.json["redriven"] == .array([.number(Double(recent))]))
            #expect(try rig.scalar(#"SELECT status FROM "PushOutbox" WHERE id = \#(earlier)"#) == "DEAD")
            let none = try await rig.run("redrive", "--since", "1h")
            #expect(none.output == "no DEAD events that died within 60m")
        }
    }

    @Test func event_showsEveryDeliveryWithTheTokenMasked() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let devices = try rig.patient(tokens: ["abcdef-the-secret-middle-uvwxyz", "ghijkl-another-secret-rstuvw"])
            let id = try rig.event(status: "DONE", hoursAgo: 1, key: "doseTaken:g")
            try rig.delivery("del-1", key: "doseTaken:g", device: devices[0], status: "SENT")
            try rig.delivery("del-2", key: "doseTaken:g", device: devices[1], status: "FAILED", lastError: "THIRD_PARTY_AUTH_ERROR")

            for selector in ["\(id)", "doseTaken:g"] {
                let result = try await rig.json("event", selector)
                #expect(result.status == 0)
                #expect(result.json["event"]?["id"] == .number(Double(id)))
                #expect(result.json["event"]?["status"] == .string("DONE"))
                let deliveries = try #require(result.json["deliveries"]?.arrayValue)
                #expect(deliveries.map { $0["token"]?.stringValue } == ["abcdef…uvwxyz", "ghijkl…rstuvw"])
                #expect(deliveries.map { $0["status"]?.stringValue } == ["SENT", "FAILED"])
                #expect(deliveries[0]["fcmMessageId"] == .string("projects/p/messages/1"))
                #expect(deliveries[1]["lastError"] == .string("THIRD_PARTY_AUTH_ERROR"))
                #expect(deliveries[0]["sentAt"]?.stringValue != nil)
            }
            let text = try await rig.run("event", "\(id)")
            #expect(text.output.contains("event \(id)  DONE  DOSE_TAKEN  patient p1"))
            // A finished event is not due again: no "next due" beside its attempts.
            #expect(text.output.contains("  attempts:   3\n"), "\(text.output)")
            #expect(text.output.contains("abcdef…uvwxyz"))
            #expect(!text.output.contains("secret"))
            let missing = try await rig.json("event", "999999")
            #expect(missing.status == 1)
            #expect(missing.json["error"]?["message"]?.stringValue?.contains("no outbox event has id 999999") == true)
        }
    }

    @Test func events_listsTheNewestInOneStateWithTheirLastError() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            let first = try rig.event(status: "DEAD", hoursAgo: 3, lastError: "bad payload: slot")
            let second = try rig.event(status: "DEAD", hoursAgo: 1, lastError: "attempts exhausted (10): INTERNAL")
            _ = try rig.event(status: "EXPIRED", hoursAgo: 30)
            let all = try await rig.json("events", "--status", "DEAD")
            #expect(all.json["events"]?.arrayValue?.map { $0["id"] } == [.number(Double(second)), .number(Double(first))])
            #expect(all.json["events"]?.arrayValue?.first?["lastError"] == .string("attempts exhausted (10): INTERNAL"))
            let recent = try await rig.json("events", "--status", "dead", "--since", "2h")
            #expect(recent.json["events"]?.arrayValue?.count == 1)
            let limited = try await rig.run("events", "--status", "DEAD", "--limit", "1")
            #expect(limited.output.contains("1 DEAD event(s) (the newest 1; --limit for more)"))
            let bad = try await rig.json("events", "--status", "DONE")
            #expect(bad.status == 64)
            #expect(bad.json["error"]?["kind"] == .string("usage"))
        }
    }

    @Test func resend_sendsFailedDeliveriesAgainButNotToDisabledDevices() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let devices = try rig.patient(tokens: ["token-healthy-aaaaaaaaaaaa", "token-disabled-bbbbbbbbbb"])
            try rig.connection.query(#"UPDATE "PushDevice" SET "isEnabled" = false WHERE id = \#(devices[1])"#)
            let id = try rig.event(status: "DONE", hoursAgo: 1, key: "doseTaken:g")
            try rig.delivery("del-1", key: "doseTaken:g", device: devices[0], status: "FAILED", lastError: "THIRD_PARTY_AUTH_ERROR")
            try rig.delivery("del-2", key: "doseTaken:g", device: devices[1], status: "FAILED", lastError: "UNREGISTERED")

            let preview = try await rig.json("resend", "--event", "\(id)", "--dry-run")
            #expect(preview.status == 0)
            #expect(preview.json["resent"] == .array([.string("del-1")]))
            #expect(preview.json["skipped"]?.arrayValue?.first?["id"] == .string("del-2"))
            #expect(try rig.scalar(#"SELECT status FROM "PushDelivery" WHERE id = 'del-1'"#) == "FAILED")

            let done = try await rig.run("resend", "--event", "\(id)")
            #expect(done.status == 0)
            #expect(done.output.contains("resent 1 delivery(ies) of event \(id): del-1"))
            #expect(done.output.contains("skipped del-2: device disabled"))
            #expect(try rig.scalar(#"SELECT status FROM "PushDelivery" WHERE id = 'del-1'"#) == "PENDING")
            #expect(try rig.scalar(#"SELECT status FROM "PushDelivery" WHERE id = 'del-2'"#) == "FAILED")
            #expect(try rig.scalar(#"SELECT status FROM "PushOutbox" WHERE id = \#(id)"#) == "PENDING")
            #expect(try rig.scalar(#"SELECT "isEnabled"::text FROM "PushDevice" WHERE id = \#(devices[1])"#) == "false")

            // Nothing left to resend: a failure, not a success.
            let again = try await rig.json("resend", "--delivery", "del-1")
            #expect(again.status == 1)
            #expect(again.json["error"]?["message"]?.stringValue?.contains("del-1 is PENDING, not FAILED") == true)
            // An event past EVENT_MAX_AGE would only expire.
            let old = try rig.event(status: "DONE", hoursAgo: 30, key: "doseTaken:old")
            try rig.delivery("del-3", key: "doseTaken:old", device: devices[0], status: "FAILED", lastError: "THIRD_PARTY_AUTH_ERROR")
            let tooOld = try await rig.json("resend", "--event", "\(old)")
            #expect(tooOld.status == 1)
            #expect(tooOld.json["skipped"]?.arrayValue?.first?["reason"]?.stringValue?.contains("EVENT_MAX_AGE") == true)
            let usage = try await rig.run("resend")
            #expect(usage.status == 64)
        }
    }

    /// Issue 54: `resend`'s error text quotes the delivery's event key, which the app wrote: on stderr and in the `--json`
    /// document it comes out escaped (ESC, BEL, `\r`, a line break, C1), one line, and the JSON still gives the text back.
    @Test func resend_hostileEventKeyInItsError_isEscapedOnStderrAndInJSON() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let devices = try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            let key = "doseTaken:\u{1B}[2J\u{1B}]0;title\u{7}\r\nforged: ok\u{9B}31m"
            let escapedKey = #"doseTaken:\u{1B}[2J\u{1B}]0;title\u{7}\r\nforged: ok\u{9B}31m"#
            // A FAILED delivery whose event is gone (OUTBOX_RETENTION): the error names the key.
            try rig.delivery("del-gone", key: key, device: devices[0], status: "FAILED", lastError: "THIRD_PARTY_AUTH_ERROR")

            let text = try await rig.run("resend", "--delivery", "del-gone")
            #expect(text.status == 1)
            #expect(text.errorOutput == "medication-worker resend: the event of delivery del-gone (key \(escapedKey)) is gone (OUTBOX_RETENTION)",
                    "\(text.errorOutput)")
            #expect(!text.errorOutput.unicodeScalars.contains { Printable.isUnsafe($0) })

            let json = await CommandRunner.execute(CommandRunner.command(named: "resend")!, arguments: ["--delivery", "del-gone", "--json"],
                                                   environment: rig.environment)
            #expect(json.status == 1)
            #expect(!json.output.unicodeScalars.contains { Printable.isUnsafe($0) }, "\(json.output)")
            #expect(!json.errorOutput.unicodeScalars.contains { Printable.isUnsafe($0) && $0 != "\n" }, "\(json.errorOutput)")
            let document = try #require(JSONValue.parse(json.output))
            #expect(document["error"]?["message"]?.stringValue
                    == "medication-worker resend: the event of delivery del-gone (key \(escapedKey)) is gone (OUTBOX_RETENTION)")

            // An argument echoed in a usage error is escaped too.
            let usage = try await rig.run("resend", "--event", "1\u{1B}[2J\r")
            #expect(usage.status == 64)
            #expect(usage.errorOutput.hasPrefix(#"medication-worker resend: --event needs an event id (a positive integer), got "1\u{1B}[2J\r""#),
                    "\(usage.errorOutput)")
        }
    }

    @Test func status_countsTheQueueAndListsTheLiveInstances() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            _ = try rig.event(status: "DEAD", hoursAgo: 1)
            _ = try rig.event(status: "PENDING", hoursAgo: 0.1)
            let instances = LiveInstances(client: PostgresClient(conninfo: conninfo))
            #expect(try await instances.heartbeat(version: "9.9.9").live == 1)
            // A row whose heartbeat stopped long ago is not live.
            try rig.connection.query("""
                INSERT INTO "_medication_worker_instances" (id, host, pid, version, "heartbeatAt")
                VALUES (gen_random_uuid(), 'gone-host', 1, '0.0.1', now() - interval '5 minutes')
                """)
            let status = try await rig.json("status")
            #expect(status.status == 0)
            #expect(status.json["events"]?["DEAD"] == .number(1))
            #expect(status.json["events"]?["PENDING"] == .number(1))
            let live = try #require(status.json["instances"]?.arrayValue)
            #expect(live.count == 1)
            #expect(live[0]["version"] == .string("9.9.9"))
            #expect(live[0]["pid"]?.intValue == Int(getpid()))
            let text = try await rig.run("status")
            #expect(text.output.contains("instances:       1 live"))
            #expect(text.output.contains("9.9.9"))
            #expect(!text.output.contains("gone-host"))
            try await instances.leave()
            #expect(try await rig.json("status").json["instances"] == .array([]))
        }
    }

    /// Issue 45: text output escapes control characters that came from the app's payload or the database (an escape
    /// sequence in "lastError" or "eventKey" reached the operator's terminal as is); `--json` keeps the value whole.
    @Test func textOutput_escapesControlCharacters_jsonKeepsThem() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            let devices = try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            let hostile = "bad payload: \u{1B}[2J\u{1B}[31mred\nforged line\u{202E}"
            let key = "doseTaken:\u{1B}]0;title\u{7}"
            let id = try rig.event(status: "DEAD", hoursAgo: 1, key: key, lastError: hostile)
            try rig.delivery("del-1", key: key, device: devices[0], status: "FAILED", lastError: "\u{1B}[31mTHIRD_PARTY_AUTH_ERROR")
            let listed = try await rig.run("events", "--status", "DEAD").output
            let shown = try await rig.run("event", "\(id)").output
            for output in [listed, shown] {
                #expect(!output.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{7}" || $0 == "\u{202E}" }, "\(output)")
                #expect(output.contains(#"bad payload: \u{1B}[2J\u{1B}[31mred\nforged line\u{202E}"#), "\(output)")
                #expect(output.contains(#"doseTaken:\u{1B}]0;title\u{7}"#), "\(output)")
                #expect(!output.contains("\nforged line"))
            }
            #expect(shown.contains(#"\u{1B}[31mTHIRD_PARTY_AUTH_ERROR"#))
            let json = try await rig.json("event", "\(id)")
            #expect(json.json["event"]?["lastError"] == .string(hostile))
            #expect(json.json["event"]?["eventKey"] == .string(key))
            #expect(Printable.escaped("plain text: ok") == "plain text: ok")
            #expect(Printable.escaped("a\tb\r\u{85}\u{2028}") == #"a\tb\r\u{85}\u{2028}"#)
        }
    }

    /// Issue 45: "eventKey" is written only when an event settles; `event KEY` still finds one that has not (PENDING on
    /// its first attempt, EXPIRED, DEAD at claim) by computing the key from its payload as the claim does.
    @Test func event_byKey_findsAnEventNotSettledYet() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            let pending = try rig.event(status: "PENDING", hoursAgo: 0.1)  // recordingGroupId "g", no key yet
            let byGroup = try await rig.json("event", "doseTaken:g")
            #expect(byGroup.status == 0)
            #expect(byGroup.json["event"]?["id"] == .number(Double(pending)))
            #expect(byGroup.json["event"]?["eventKey"] == .null)
            #expect(byGroup.json["event"]?["computedEventKey"] == .string("doseTaken:g"))
            let text = try await rig.run("event", "doseTaken:g")
            #expect(text.output.contains("  key:        doseTaken:g (computed from the payload; written when the event settles)"), "\(text.output)")

            let expired = try Int64(rig.connection.query("""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, "createdAt", status)
                VALUES ('DOSE_TAKEN', 'p1', '{"date":"2026-02-11","slot":"evening","withinTime":false,"isPrn":false,"takenAt":"2026-02-11T19:03:27+09:00"}',
                        now() - interval '30 hours', \(literal: OutboxStatus.expired))
                RETURNING id
                """)[0]["id"].int())
            let byTime = try await rig.json("event", "doseTaken:p1:2026-02-11:evening:19:03")
            #expect(byTime.status == 0)
            #expect(byTime.json["event"]?["id"] == .number(Double(expired)))
            #expect(try await rig.json("event", "doseTaken:p1:2026-02-11:evening:19:04").status == 1)
            #expect(try await rig.json("event", "doseTaken:nothing").status == 1)

            // DEAD at claim for bad input: no key can be computed, and the text says why.
            let bad = try Int64(rig.connection.query("""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "lastError")
                VALUES ('DOSE_TAKEN', 'p1', '{"slot":"brunch"}', \(literal: OutboxStatus.dead), 'bad input') RETURNING id
                """)[0]["id"].int())
            #expect(try await rig.run("event", "\(bad)").output.contains("  key:        (none: the payload is not a valid DOSE_TAKEN event)"))
            #expect(try await rig.json("event", "\(bad)").json["event"]?["computedEventKey"] == .null)
        }
    }

    /// Issue 45: `status` reads no DONE row on a large outbox: past 100,000 finished rows by the statistics, DONE is the
    /// estimate (~N), as the gauges show it; below, an exact count.
    @Test func status_estimatesDoneOnALargeOutbox_andCountsItOnASmallOne() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try CommandRig(conninfo)
            try rig.patient(tokens: ["token-aaaaaaaaaaaaaaaaaaaa"])
            for _ in 0..<3 { _ = try rig.event(status: "DONE", hoursAgo: 1, key: "doseTaken:g") }
            let small = try await rig.json("status")
            #expect(small.json["events"]?["DONE"] == .number(3))
            #expect(small.json["doneEstimated"] == .bool(false))
            #expect(try await rig.run("status").output.contains("(due now 0), done 3, dead 0"))
            // What autovacuum's analyze records for a 10M-row outbox (the test runs as a superuser).
            try rig.connection.query(#"UPDATE pg_class SET reltuples = 10000000 WHERE oid = to_regclass('"PushOutbox_finished_idx"')"#)
            let large = try await rig.json("status")
            #expect(large.json["events"]?["DONE"] == .number(10_000_000))
            #expect(large.json["doneEstimated"] == .bool(true))
            #expect(try await rig.run("status").output.contains("(due now 0), done ~10000000 (estimated), dead 0"))
        }
    }

    @Test func everyCommand_hasItsOwnHelpAndRefusesUnknownOptions() async throws {
        for type in CommandRunner.commands {
            let help = await CommandRunner.execute(type, arguments: ["--help"], environment: [:])
            #expect(help.status == 0)
            #expect(help.output.hasPrefix("Usage: medication-worker \(type.name)"), "\(type.name): \(help.output)")
            let unknown = await CommandRunner.execute(type, arguments: ["--no-such-option", "--json"], environment: [:])
            #expect(unknown.status == 64, "\(type.name)")
            #expect(JSONValue.parse(unknown.output)?["error"]?["kind"] == .string("usage"), "\(type.name): \(unknown.output)")
        }
    }

    /// Issue 45: the help says what the commands now do (redrive's scope, status's estimate, event's computed key).
    @Test func help_describesTheScopeTheEstimateAndTheComputedKey() async throws {
        func help(_ name: String) async throws -> String {
            await CommandRunner.execute(try #require(CommandRunner.command(named: name)), arguments: ["--help"], environment: [:]).output
        }
        let redrive = try await help("redrive")
        #expect(redrive.hasPrefix("Usage: medication-worker redrive (--all | --event ID | --since DURATION) [--dry-run] [--json]"))
        #expect(redrive.contains("--all             Every DEAD event younger than EVENT_MAX_AGE."))
        let status = try await help("status")
        #expect(status.contains("DONE is\ncounted while the table's statistics put it under 100,000 rows"), "\(status)")
        #expect(!status.contains("small partial indexes"))
        #expect(try await help("event").contains("it is computed\nfrom the payload as the claim computes it"))
    }

    @Test func databaseCommands_withoutDatabaseURL_exit78NamingIt() async throws {
        for name in ["status", "events", "redrive"] {
            let type = try #require(CommandRunner.command(named: name))
            let arguments = name == "events" ? ["--status", "DEAD", "--json"] : name == "redrive" ? ["--all", "--json"] : ["--json"]
            let result = await CommandRunner.execute(type, arguments: arguments, environment: ["EVENT_MAX_AGE": "24h"])
            #expect(result.status == 78)
            #expect(JSONValue.parse(result.output)?["error"]?["setting"] == .string("DATABASE_URL"))
            #expect(result.errorOutput.contains("DATABASE_URL: is not set"))
        }
    }
}
