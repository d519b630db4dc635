import FCMEmulator
import Foundation
import HTTP
import HTTPServer
import Outbox
import Postgres
import TestSupport
import Testing

/// The daemon exactly as the operator guide says to run it: `migrate` as the owner, then `sql/roles.sql`, then
/// `run`, `status` and `redrive` under `medication_worker`. Every loop must work under that role: delivery, dead
/// tokens, retention, the status gauges, the entitlement sweep and notification history. A migration that adds a
/// table the daemon uses fails here until the role covers it.
@Suite("Under the least-privilege role of sql/roles.sql", .serialized, .blockingFixtures)
struct LeastPrivilegeRoleTests {
    static var rolesSQL: String {
        get throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            return try String(contentsOf: root.appendingPathComponent("sql/roles.sql"), encoding: .utf8)
        }
    }

    static func run(_ arguments: [String], environment: [String: String]) async throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestBinaries.path("medication-worker"))
        process.arguments = arguments
        process.environment = environment
        let outputPath = try TestBinaries.temporaryFile("", suffix: ".out")
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let output = FileHandle(forWritingAtPath: outputPath)
        process.standardOutput = output
        process.standardError = output
        let status = try await process.runToExit()
        return (status, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
    }

    @Test func everyLoop_worksUnderTheDocumentedRole() async throws {
        try await TestDatabase.withMigratedDatabase { owner in
            let admin = try PostgresConnection(conninfo: owner)
            try admin.executeScript("\(unescaped: try Self.rolesSQL)")
            let worker = owner + " user=medication_worker"
            let db = PostgresClient(conninfo: owner, maxConnections: 1)
            try await db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', 'name')"#)
            try await db.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l1', 'c1', 'p1', \#(literal: LinkStatus.active))"#)
            try await db.query(#"""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d1', \#(literal: OwnerType.caregiver), 'c1', 'good-1'), ('d2', \#(literal: OwnerType.caregiver), 'c1', 'unregistered-2')
                """#)
            // History for retention, an entitlement for the sweep, a DEAD event for redrive.
            try await db.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "processedAt", "eventKey")
                SELECT 'DOSE_TAKEN', 'p1', '{}', \#(literal: OutboxStatus.done), now() - interval '30 days', 'old-' || g FROM generate_series(1, 5) g
                """#)
            try await db.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload, status, "processedAt", "lastError")
                VALUES ('DOSE_TAKEN', 'p-none', '{"date":"2026-02-11"}', \#(literal: OutboxStatus.dead), now(), 'bad payload')
                """#)
            try await EntitlementRecheckerTests.insert(db, id: "e1", transaction: "7100000001")

            let fixtures = TLSFixtures.shared
            let keys = try fixtures.rsaKeyPair()
            let emulator = try FCMEmulator(configuration: fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM))
            defer { emulator.stop() }
            let pki = ApplePKI.shared
            let production = try FakeAppStore(apiPublicKeyPEM: pki.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1",
                                              bundleId: EntitlementRecheckerTests.bundle)
            let sandbox = try FakeAppStore(apiPublicKeyPEM: pki.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1",
                                           bundleId: EntitlementRecheckerTests.bundle)
            defer { production.stop(); sandbox.stop() }
            let probe = try HTTPServer { _ in .text(200, "") }
            let port = probe.port
            probe.stop()
            let environment = [
                "DATABASE_URL": worker, "FCM_SERVICE_ACCOUNT_FILE": try fixtures.serviceAccountFile(privateKeyPEM: keys.privatePEM, tokenURI: emulator.tokenURI),
                "FCM_BASE_URL": emulator.baseURL, "TLS_CA_FILE": fixtures.caFile, "HEALTH_ADDR": "127.0.0.1:\(port)", "LOG_LEVEL": "info",
                "POLL_INTERVAL_MS": "200", "SHUTDOWN_TIMEOUT": "5s", "APPSTORE_NOTIFICATION_HISTORY": "on",
                "APPSTORE_NOTIFICATION_POLL_INTERVAL": "1s",
            ].merging(try AppStoreDaemonTests.appStoreEnvironment(production: production, sandbox: sandbox)) { $1 }

            let logPath = NSTemporaryDirectory() + "mw-role-\(UUID().uuidString).log"
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
            let daemon = Process()
            daemon.executableURL = URL(fileURLWithPath: TestBinaries.path("medication-worker"))
            daemon.arguments = ["run"]
            daemon.environment = environment
            daemon.standardOutput = FileHandle.nullDevice
            daemon.standardError = FileHandle(forWritingAtPath: logPath)
            let exit = try daemon.start()
            defer { if !exit.hasExited { daemon.terminate(); _ = exit.waitBlocking() } }

            try await db.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload) VALUES ('DOSE_TAKEN', 'p1',
                '{"date":"2026-02-11","slot":"noon","recordingGroupId":"g-role","withinTime":false,"isPrn":false,"takenAt":"2026-02-11T12:00:00+09:00"}')
                """#)
            let client = try HTTPClient()
            defer { client.shutdown() }
            func get(_ path: String) async -> String? {
                guard let response = try? await client.execute(HTTPRequest(url: "http://127.0.0.1:\(port)\(path)", timeout: .seconds(5))),
                      response.status == 200 else { return nil }
                return String(decoding: response.body, as: UTF8.self)
            }
            // Every loop has done its work once.
            var ready = false, delivered = false, pruned = false, swept = false, polled = false, gauges = false
            for _ in 0..<300 where !(ready && delivered && pruned && swept && polled && gauges) {
                ready = await get("/readyz") != nil
                let metrics = await get("/metrics") ?? ""
                gauges = metrics.contains(#"push_outbox_events{status="DEAD"} 1"#)
                swept = metrics.contains("entitlement_checks_total{")
                let row = try await db.query(#"""
                    SELECT (SELECT count(*) FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done) AND "eventKey" = 'doseTaken:g-role') AS done,
                           (SELECT count(*) FROM "PushDevice" WHERE id = 'd2' AND NOT "isEnabled") AS disabled,
                           (SELECT count(*) FROM "PushOutbox" WHERE "eventKey" LIKE 'old-%') AS old,
                           (SELECT count(*) FROM "AppStoreNotificationCheckpoint") AS checkpoints
                    """#)[0]
                delivered = try row["done"].int() == 1 && row["disabled"].int() == 1
                pruned = try row["old"].int() == 0
                polled = try row["checkpoints"].int() > 0
                if !(ready && delivered && pruned && swept && polled && gauges) { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(ready, "/readyz never 200 under the role")
            #expect(delivered, "the push was not delivered or the dead token not disabled")
            #expect(pruned, "retention did not delete the old rows")
            #expect(gauges, "the status gauges were not published")
            #expect(swept, "the entitlement sweep did not run")
            #expect(polled, "notification history wrote no checkpoint")
            // The instance row, kept under the role, is what `status` lists.
            let live = try await Self.run(["status", "--json"], environment: environment)
            #expect(live.status == 0, "status: \(live.output)")
            #expect(live.output.contains(#""pid":\#(daemon.processIdentifier)"#), "status lists the running instance: \(live.output)")
            daemon.terminate()
            #expect(await exit.wait() == 0)
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            #expect(!log.contains("permission denied"), "\(log.split(separator: "\n").filter { $0.contains("permission denied") }.prefix(3))")

            let status = try await Self.run(["status"], environment: environment)
            #expect(status.status == 0, "status: \(status.output)")
            #expect(status.output.contains("instances:       0 live"), "a clean stop deletes the instance row: \(status.output)")
            // Every operator command under the role: reading, previews, and the writes.
            let doneEvent = try await db.query(#"SELECT id FROM "PushOutbox" WHERE "eventKey" = 'doseTaken:g-role'"#)[0]["id"].int()
            for arguments in [["event", "\(doneEvent)"], ["event", "doseTaken:g-role"], ["events", "--status", "DEAD"],
                              ["redrive", "--dry-run"], ["devices", "disabled"], ["devices", "enable", "--since", "1h", "--dry-run"]] {
                let result = try await Self.run(arguments + ["--json"], environment: environment)
                #expect(result.status == 0, "\(arguments): \(result.output)")
            }
            let disabled = try await Self.run(["devices", "disabled", "--json"], environment: environment)
            #expect(disabled.output.contains(#""pushDeviceId":"d2""#) && disabled.output.contains(#""reason":"UNREGISTERED""#), "\(disabled.output)")
            let enabled = try await Self.run(["devices", "enable", "--since", "1h"], environment: environment)
            #expect(enabled.status == 0 && enabled.output.contains("re-enabled 1 device(s)"), "devices enable: \(enabled.output)")
            let resent = try await Self.run(["resend", "--event", "\(doneEvent)"], environment: environment)
            #expect(resent.status == 0 && resent.output.contains("resent 1 delivery(ies)"), "resend: \(resent.output)")
            let redrive = try await Self.run(["redrive", "--all"], environment: environment)
            #expect(redrive.status == 0, "redrive: \(redrive.output)")
            #expect(try await db.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.dead)"#)[0]["n"].int() == 0)
        }
    }
}
