import FCM
import Foundation
import OperatorCommands
import JSON
import Outbox
import Postgres
import Push
import TestSupport
import Testing

@Suite("Delivery pipeline", .blockingFixtures)
struct PipelineTests {
    @Test func happyPath_sendsOncePerDeviceAndMarksEventDone() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1", name: "山田花子")
            try db.link(caregiver: "c1", patient: "p1")
            try db.device(owner: "c1", token: "token-a", id: "d1")
            try db.device(owner: "c1", token: "token-b", id: "d2")
            try db.device(owner: "c1", token: "token-off", enabled: false, id: "d3")
            try db.device(owner: "someone-else", token: "token-x", id: "d4")
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let sender = FakeSender()
            let (worker, metrics, _) = makeWorker(conninfo, sender: sender)
            #expect(try await worker.drain() == 1)
            #expect(try db.eventStatus(id).status == .done)
            let deliveries = try db.deliveries()
            #expect(deliveries.map(\.device) == ["d1", "d2"])
            #expect(deliveries.allSatisfy { $0.status == .sent && $0.key == "doseTaken:group-1" })
            #expect(deliveries.map(\.messageId) == ["projects/p/messages/token-a", "projects/p/messages/token-b"])
            let pushes = sender.pushes.sorted { $0.token < $1.token }
            #expect(pushes.map(\.token) == ["token-a", "token-b"])
            // apns-expiration: the row's createdAt + EVENT_MAX_AGE (24 h), in UNIX seconds.
            let expiration = try db.connection.query(#"SELECT floor(extract(epoch FROM "createdAt") + 86400)::bigint AS e FROM "PushOutbox" WHERE id = \#(id)"#)[0]["e"]
                .int()
            #expect(pushes[0] == DoseTakenPush(token: "token-a", eventKey: "doseTaken:group-1", patientId: "p1", displayName: "山田花子",
                                               date: "2026-02-11", slot: "morning", recordingGroupId: "group-1", withinTime: true,
                                               expiration: Int64(expiration)))
            #expect(metrics.render().contains("push_delivery_latency_seconds_count 2"))
            #expect(metrics.value("push_deliveries_total", labels: ["result": "sent"]) == 2)
        }
    }

    @Test func noActiveLink_isDoneWithZeroDeliveries() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1", status: .revoked)
            try db.device(owner: "c1", token: "token-a")
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            #expect(try db.eventStatus(id).status == .done)
            #expect(try db.deliveries().isEmpty)
            #expect(sender.pushes.isEmpty)
        }
    }

    @Test func sameRecordingGroupTwice_onePushPerDevice() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a", "token-b"])
            let first = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g-same"))
            let sender = FakeSender()
            let (worker, _, _) = makeWorker(conninfo, sender: sender)
            try await worker.drain()
            let second = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g-same"))
            try await worker.drain()
            #expect(sender.pushes.count == 2)
            #expect(try db.deliveries().count == 2)
            #expect(try db.eventStatus(first).status == .done)
            #expect(try db.eventStatus(second).status == .done)
        }
    }

    @Test func badInput_goesDeadWhileAGoodEventBehindItIsSent() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let bad = [
                try db.enqueue(patient: "p1", payload: "{}", eventType: "DOSE_SKIPPED"),
                try db.enqueue(patient: "p1", payload: "[]"),
                try db.enqueue(patient: "p1", payload: #"{"slot":"morning","withinTime":true,"takenAt":"2026-02-11T08:03:27+09:00"}"#),
                try db.enqueue(patient: "p1", payload: Fixtures.payload(slot: "brunch")),
                try db.enqueue(patient: "ghost", payload: Fixtures.payload(group: "g-ghost")),
            ]
            let good = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g-good"))
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            let errors = try bad.map { try db.eventStatus($0) }
            #expect(errors.allSatisfy { $0.status == .dead })
            #expect(errors[0].lastError?.contains("unknown eventType \"DOSE_SKIPPED\"") == true)
            #expect(errors[1].lastError?.contains("payload is a JSON array") == true)
            #expect(errors[2].lastError?.contains("payload.date is missing") == true)
            #expect(errors[3].lastError?.contains("payload.slot \"brunch\"") == true)
            #expect(errors[4].lastError?.contains("unknown patient ghost") == true)
            #expect(try db.eventStatus(good).status == .done)
            #expect(sender.pushes.map(\.eventKey) == ["doseTaken:g-good"])
        }
    }

    @Test func retry_honoursRetryAfterAndKeepsDeliveryPending() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let sender = FakeSender { _ in .retry(reason: "UNAVAILABLE", after: .seconds(120), minimumBackoff: nil) }
            try await makeWorker(conninfo, sender: sender).0.drain()
            let row = try db.connection.query(#"""
                SELECT status, attempts, "lastError", extract(epoch FROM "availableAt" - now())::float8 AS wait,
                       "leaseToken" IS NULL AS released FROM "PushOutbox" WHERE id = \#(id)
                """#)[0]
            #expect(try row["status"].decode(OutboxStatus.self) == .pending)
            #expect(try row["attempts"].int() == 1)
            #expect(row["lastError"].optionalString() == "UNAVAILABLE")
            #expect(try row["wait"].double() >= 100)  // Retry-After (120 s), not the 2 s backoff; slack for a loaded machine
            #expect(try row["released"].bool())
            #expect(try db.deliveries().map(\.status) == [.pending])
        }
    }

    @Test func quotaExceededWithoutRetryAfter_backsOffAtLeastSixtySeconds() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let sender = FakeSender { _ in .retry(reason: "QUOTA_EXCEEDED", after: nil, minimumBackoff: .seconds(60)) }
            try await makeWorker(conninfo, sender: sender).0.drain()
            let wait = try db.connection.query(#"SELECT extract(epoch FROM "availableAt" - now())::float8 AS w FROM "PushOutbox" WHERE id = \#(id)"#)[0]["w"].double()
            #expect(wait >= 50)  // the 60 s QUOTA floor, not the 2 s backoff; slack for a loaded machine
        }
    }

    @Test func attemptsExhausted_eventGoesDeadAndRedriveRevivesIt() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let failing = FakeSender { _ in .retry(reason: "INTERNAL", after: nil, minimumBackoff: nil) }
            let (worker, _, _) = makeWorker(conninfo, sender: failing) { $0.maxAttempts = 3 }
            for _ in 0..<3 {
                try await worker.drain()
                try db.connection.query(#"UPDATE "PushOutbox" SET "availableAt" = now() WHERE status = \#(literal: OutboxStatus.pending)"#)
            }
            let dead = try db.eventStatus(id)
            #expect(dead.status == .dead)
            #expect(dead.attempts == 3)
            #expect(dead.lastError?.contains("attempts exhausted") == true)

            let redrive = CommandRunner.command(named: "redrive")!
            let environment = ["DATABASE_URL": conninfo]
            let redriven = await CommandRunner.execute(redrive, arguments: ["--event", "\(id)", "--json"], environment: environment)
            #expect(redriven.status == 0)
            #expect(JSONValue.parse(redriven.output)?["redriven"] == .array([.number(Double(id))]))
            try await makeWorker(conninfo, sender: FakeSender()).0.drain()
            #expect(try db.eventStatus(id).status == .done)
            #expect(try db.deliveries().map(\.status) == [.sent])
            let again = await CommandRunner.execute(redrive, arguments: ["--event", "\(id)"], environment: environment)
            #expect(again.status == 1)
            #expect(again.errorOutput.contains("outbox event \(id) is DONE, not DEAD"))
        }
    }

    @Test func staleEvent_isExpiredWithoutSending() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            try db.connection.query(#"UPDATE "PushOutbox" SET "createdAt" = now() - interval '25 hours' WHERE id = \#(id)"#)
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()
            #expect(try db.eventStatus(id).status == .expired)
            #expect(sender.pushes.isEmpty)
        }
    }

    @Test func deadToken_disablesDeviceUnlessReRegisteredDuringTheSend() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            try db.device(owner: "c1", token: "dead-token-1", id: "d-dead")
            try db.device(owner: "c1", token: "dead-token-2", id: "d-reregistered")
            try db.device(owner: "c1", token: "payload-bug", id: "d-ok")
            let connection = db.connection
            let sender = FakeSender { push in
                switch push.token {
                case "dead-token-2":
                    // The app re-registers this device while the send is in flight.
                    _ = try? PostgresConnection(conninfo: conninfo).query(
                        #"UPDATE "PushDevice" SET "lastSeenAt" = clock_timestamp() + interval '1 second' WHERE id = 'd-reregistered'"#)
                    return .tokenInvalid(.unregistered)
                case "payload-bug": return .permanentFailure(reason: "INVALID_ARGUMENT")
                default: return .tokenInvalid(.unregistered)
                }
            }
            _ = connection
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let (worker, metrics, _) = makeWorker(conninfo, sender: sender)
            try await worker.drain()
            #expect(try db.eventStatus(id).status == .done)
            #expect(try db.deliveries().allSatisfy { $0.status == .failed })
            let enabled = try db.connection.query(#"SELECT id, "isEnabled" FROM "PushDevice" ORDER BY id"#)
                .map { "\(try $0["id"].string())=\(try $0["isEnabled"].bool())" }
            #expect(enabled == ["d-dead=false", "d-ok=true", "d-reregistered=true"])
            #expect(metrics.value("push_tokens_disabled_total", labels: ["reason": "UNREGISTERED"]) == 1)
        }
    }

    /// Issue 54: a key without a `recordingGroupId` is a patient and the time of a dose, so the log names an event by its
    /// outbox id. The info line (a dead token) and the error line (a refused payload) carry `outbox.id`; no entry carries
    /// the key, in its message or its metadata.
    @Test func logLines_nameTheEventByItsOutboxId_neverByItsKey() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            try db.device(owner: "c1", token: "dead-token-1", id: "d-dead")
            try db.device(owner: "c1", token: "payload-bug", id: "d-bug")
            let sender = FakeSender { push in
                push.token == "payload-bug" ? .permanentFailure(reason: "INVALID_ARGUMENT") : .tokenInvalid(.unregistered)
            }
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: nil))
            let (worker, _, sink) = makeWorker(conninfo, sender: sender)
            try await worker.drain()
            let key = "doseTaken:p1:2026-02-11:morning:08:03"
            #expect(try db.deliveries().map(\.key) == [key, key])

            let entries = sink.entries
            let invalid = try #require(entries.first { $0.message == "device token is no longer valid" })
            #expect(invalid.level == .info)
            #expect(invalid.metadata["outbox.id"] == "\(id)")
            #expect(invalid.metadata["device.id"] == "d-dead")
            let failed = try #require(entries.first { $0.message.hasPrefix("push failed permanently") })
            #expect(failed.level == .error)
            #expect(failed.metadata["outbox.id"] == "\(id)")
            for entry in entries {
                #expect(!entry.message.contains("doseTaken") && !entry.metadata.values.contains { $0.contains("doseTaken") || $0.contains("08:03") },
                        "\(entry.message) \(entry.metadata)")
                #expect(entry.metadata["outbox.event_key"] == nil)
            }
        }
    }
}
