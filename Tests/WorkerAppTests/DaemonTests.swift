import FCMEmulator
import Foundation
import HTTP
import HTTPServer
import Outbox
import Postgres
import Schema
import Synchronization
import TestSupport
import Testing
import TextSupport

/// The real `medication-worker run` binary: sd_notify protocol, endpoints, log redaction, SIGTERM.
@Suite("Daemon as systemd runs it", .blockingFixtures)
struct DaemonTests {
    /// A running daemon against a database, the emulator and a notify socket.
    final class Rig: Sendable {
        let emulator: FCMEmulator
        let notify: NotifySocket
        let process = Process()
        let stderrPath: String
        let healthPort: UInt16
        let serviceAccountPEM: String
        private let exit: ProcessExit

        /// `openFileLimit`: the daemon's RLIMIT_NOFILE (soft and hard), as a unit's `LimitNOFILE=` would set it.
        /// `sharing`: an emulator another daemon uses too, and the service account's key it accepts (default: one of
        /// its own).
        init(databaseURL: String, extra: [String: String] = [:], openFileLimit: Int? = nil,
             sharing: (emulator: FCMEmulator, privateKeyPEM: String)? = nil) throws {
            let fixtures = TLSFixtures.shared
            if let sharing {
                serviceAccountPEM = sharing.privateKeyPEM
                emulator = sharing.emulator
            } else {
                let keys = try fixtures.rsaKeyPair()
                serviceAccountPEM = keys.privatePEM
                emulator = try FCMEmulator(configuration: fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM))
            }
            let account = try fixtures.serviceAccountFile(privateKeyPEM: serviceAccountPEM, tokenURI: emulator.tokenURI)
            notify = try NotifySocket()
            let probe = try HTTPServer { _ in .text(200, "") }
            healthPort = probe.port
            probe.stop()
            stderrPath = NSTemporaryDirectory() + "mw-daemon-\(UUID().uuidString).log"
            _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
            if let openFileLimit {
                // prlimit(1) sets the limit and execs the daemon: the same process id.
                process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
                process.arguments = ["--nofile=\(openFileLimit):\(openFileLimit)", "--", TestBinaries.path("medication-worker"), "run"]
            } else {
                process.executableURL = URL(fileURLWithPath: TestBinaries.path("medication-worker"))
                process.arguments = ["run"]
            }
            process.environment = [
                "DATABASE_URL": databaseURL, "FCM_SERVICE_ACCOUNT_FILE": account, "FCM_BASE_URL": emulator.baseURL,
                "TLS_CA_FILE": fixtures.caFile, "HEALTH_ADDR": "127.0.0.1:\(healthPort)", "NOTIFY_SOCKET": notify.path,
                "WATCHDOG_USEC": "1000000", "LOG_LEVEL": "trace", "POLL_INTERVAL_MS": "200", "SHUTDOWN_TIMEOUT": "5s",
            ].merging(extra) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle(forWritingAtPath: stderrPath)
            exit = try process.start()
        }

        var log: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

        func get(_ path: String) async throws -> HTTPResponse {
            let client = try HTTPClient()
            defer { client.shutdown() }
            return try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(healthPort)\(path)", timeout: .seconds(5)))
        }

        /// Its exit status once it exits by itself (no signal).
        func exitStatus() async -> Int32 { await exit.wait() }

        /// SIGTERM (unless it has exited), then its exit status.
        func terminate() async -> Int32 {
            if !exit.hasExited { process.terminate() }
            return await exit.wait()
        }

        /// SIGTERM and the exit, for `defer` (a test that ended early): the emulator must outlive the daemon's requests.
        func stop() {
            if !exit.hasExited { process.terminate() }
            _ = exit.waitBlocking()
        }
    }

    @Test func notifyProtocol_endpoints_redaction_andGracefulStop() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in try await Self.scenario(conninfo) }
    }

    static func scenario(_ conninfo: String) async throws {
        let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
        let secretToken = "fcm-token-" + String(repeating: "S3CR3T", count: 20)
        let secretName = "秘密の患者名"
        try await db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', \#(secretName))"#)
        try await db.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l1', 'c1', 'p1', \#(literal: LinkStatus.active))"#)
        let unregistered = "unregistered-" + String(repeating: "D", count: 40)
        try await db.query(#"""
            INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d1', \#(literal: OwnerType.caregiver), 'c1', \#(secretToken)), ('d2', \#(literal: OwnerType.caregiver), 'c1', \#(unregistered))
            """#)
        let rig = try Rig(databaseURL: conninfo)
        defer { rig.stop() }

        let startup = try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20)
        #expect(startup.contains { $0.contains("READY=1") }, "notifications: \(startup)")

        try await db.query(Fixtures.enqueueQuery(patient: "p1", payload: Fixtures.noonPayload(group: "g-daemon")))
        try await eventually("every event is DONE", timeout: .seconds(10), every: .milliseconds(100)) {
            try await db.query(#"SELECT bool_and(status = \#(literal: OutboxStatus.done)) AS ok FROM "PushOutbox""#)[0]["ok"].bool()
        }
        #expect(rig.emulator.receivedMessages.map(\.token) == [secretToken])

        let running = try await rig.notify.read(until: { $0.contains("WATCHDOG=1") }, seconds: 5)
            + rig.notify.read(until: { $0.hasPrefix("STATUS=sent 1, backlog 0, dead 0") }, seconds: 12)
        #expect(running.contains("WATCHDOG=1"))
        #expect(running.contains { $0.hasPrefix("STATUS=sent 1, backlog 0, dead 0") }, "notifications: \(running)")

        let health = try await rig.get("/healthz")
        #expect(health.status == 200)
        let ready = try await rig.get("/readyz")
        #expect(ready.status == 200)
        #expect(String(decoding: ready.body, as: UTF8.self)
                == #"{"status":"ready","checks":{"app_store":"disabled","database":"ok","fcm":"ok","fcm_credentials":"ok"}}"#)
        let metrics = String(decoding: try await rig.get("/metrics").body, as: UTF8.self)
        for family in ["push_deliveries_total", "push_outbox_events", "push_outbox_oldest_pending_seconds",
                       "push_send_duration_seconds", "push_tokens_disabled_total", "fcm_token_refreshes_total",
                       "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"] {
            #expect(metrics.contains("# HELP \(family) ") && metrics.contains("# TYPE \(family) "), "\(family) missing")
        }
        #expect(metrics.contains(#"push_deliveries_total{result="sent"} 1"#))
        #expect(metrics.contains(#"push_tokens_disabled_total{reason="UNREGISTERED"} 1"#))
        #expect(try await rig.get("/nope").status == 404)

        #expect(await rig.terminate() == 0)
        let stopping = try await rig.notify.read(until: { $0.contains("STOPPING=1") }, seconds: 2)
        #expect(stopping.contains("STOPPING=1"))

        // Redaction: the whole log at trace level holds no token, key, access token or name.
        let log = rig.log
        #expect(log.contains("device token is no longer valid"))
        #expect(!log.contains(secretToken))
        #expect(!log.contains(String(repeating: "D", count: 40)))
        #expect(!log.contains("ya29."))
        #expect(!log.contains("PRIVATE KEY"))
        #expect(!log.contains(rig.serviceAccountPEM.split(separator: "\n")[1]))
        #expect(!log.contains(secretName))
    }

    /// The database goes away under the daemon (connections refused, sessions killed, as in a
    /// restart or failover): /readyz turns 503 naming it, /healthz stays 200, and both recover.
    /// (scripts/faults restarts the real server.)
    @Test func readyz_turns503WhenTheDatabaseIsUnavailableAnd200WhenItReturns() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in try await Self.unavailableScenario(conninfo) }
    }

    static func unavailableScenario(_ conninfo: String) async throws {
        let admin = PostgresClient(conninfo: try TestDatabase.adminConninfo(), maxConnections: 1)
        let name = conninfo.split(separator: " ").last { $0.hasPrefix("dbname=") }.map { String($0.dropFirst(7)) } ?? ""
        let rig = try Rig(databaseURL: conninfo)
        defer { rig.stop() }
        _ = try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20)
        #expect(try await rig.get("/readyz").status == 200)

        try await admin.query("ALTER DATABASE \(unescaped: name) ALLOW_CONNECTIONS false")
        try await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(name)")
        try await eventually("/readyz answers 503 with the sessions killed", timeout: .seconds(20), every: .milliseconds(200)) {
            try await rig.get("/readyz").status == 503
        }
        let body = String(decoding: try await rig.get("/readyz").body, as: UTF8.self)
        #expect(body.contains(#""status":"not_ready""#) && body.contains(#""database":"down: "#))
        #expect(try await rig.get("/healthz").status == 200)  // alive: a restart would not help

        try await admin.query("ALTER DATABASE \(unescaped: name) ALLOW_CONNECTIONS true")
        try await eventually("/readyz answers 200 again", timeout: .seconds(20), every: .milliseconds(200)) {
            try await rig.get("/readyz").status == 200
        }
        #expect(rig.process.isRunning)
    }

    /// SPEC §3 "A database that hangs": a server that accepts TCP and never answers. The daemon stays
    /// alive (200) past the 25 s stall limit (waiting for the database is not a stall: before, `/healthz` turned 503
    /// `stalled` there), not ready (503); a SIGHUP is logged and ignored (before, it ended the process at once); and
    /// SIGTERM ends it with status 0 within SHUTDOWN_TIMEOUT.
    @Test func hungDatabase_aliveNotReady_andSIGTERMExitsZeroWithinTheShutdownTimeout() async throws {
        let silent = LoopbackSocket()
        defer { silent.close() }
        let rig = try Rig(databaseURL: "host=127.0.0.1 port=\(silent.port) user=worker dbname=app", extra: ["SHUTDOWN_TIMEOUT": "4s"])
        defer { rig.stop() }
        try await eventually("/healthz answers 200", timeout: .seconds(10), every: .milliseconds(100)) {
            (try? await rig.get("/healthz").status) == 200
        }
        try await Task.sleep(for: .seconds(6))  // past the first connect attempt's timeout: a second attempt is under way
        #expect(try await rig.get("/healthz").status == 200)
        let ready = try await rig.get("/readyz")
        #expect(ready.status == 503)
        #expect(String(decoding: ready.body, as: UTF8.self).contains(#""database":"down: "#))
        kill(rig.process.processIdentifier, SIGHUP)
        try await eventually("the SIGHUP is logged", timeout: .seconds(5), every: .milliseconds(100)) { rig.log.contains("SIGHUP ignored") }
        try await Task.sleep(for: .seconds(21))  // past the stall limit (25 s) since the start
        let alive = try await rig.get("/healthz")
        #expect(alive.status == 200, "\(String(decoding: alive.body, as: UTF8.self))")
        let clock = ContinuousClock()
        let started = clock.now
        let status = await rig.terminate()
        let took = clock.now - started
        #expect(status == 0)
        #expect(took < .seconds(4) + .milliseconds(900), "SIGTERM to exit took \(took)")
        #expect(!rig.log.contains("shutdown deadline passed"), "stopped only by the last-resort deadline")
        print("hung database: SIGTERM to exit \(took) (SHUTDOWN_TIMEOUT 4s), exit status \(status)")
    }

    /// Started before PostgreSQL (a host booting, a failover in progress): the daemon waits, then
    /// delivers once the database is up and migrated, without a restart.
    @Test func startedBeforePostgreSQL_deliversOnceTheDatabaseIsUp() async throws {
        let cluster = try TemporaryCluster()
        defer { cluster.stop() }
        let rig = try Rig(databaseURL: cluster.conninfo)
        defer { rig.stop() }
        let waiting = try await rig.notify.read(until: { $0.contains("STATUS=waiting for the database") }, seconds: 20)
        #expect(waiting.contains("STATUS=waiting for the database"))

        try cluster.start()
        try Self.prepare(cluster.conninfo)
        let db = PostgresClient(conninfo: cluster.conninfo, maxConnections: 1)
        try await db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', 'name')"#)
        try await db.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l1', 'c1', 'p1', \#(literal: LinkStatus.active))"#)
        try await db.query(#"INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d1', \#(literal: OwnerType.caregiver), 'c1', 'late-token')"#)
        let ready = try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 30)
        #expect(ready.contains("READY=1"), "notifications: \(ready)")
        try await db.query(Fixtures.enqueueQuery(patient: "p1", payload: Fixtures.noonPayload(group: "g-late")))
        try await eventually("every event is DONE", timeout: .seconds(10), every: .milliseconds(100)) {
            try await db.query(#"SELECT bool_and(status = \#(literal: OutboxStatus.done)) AS ok FROM "PushOutbox""#)[0]["ok"].bool()
        }
        #expect(rig.emulator.receivedMessages.map(\.token) == ["late-token"])
        #expect(await rig.terminate() == 0)
    }

    /// A database that freezes after the daemon is ready (SIGSTOP: TCP still acknowledged, nothing answered).
    /// `statement_timeout` can never fire on such a server; the worker ends its own calls after 1.5 ×
    /// DATABASE_STATEMENT_TIMEOUT, so /readyz turns 503, /healthz stays 200 and SIGTERM exits 0 in time.
    /// A database that stops answering (a black-holed path, a frozen server) with the default 30 s statement timeout:
    /// `/readyz` turns 503 within seconds, not after the pool's 45 s deadline; `/healthz` stays 200.
    /// What a frozen-database test prints when `/readyz` stayed 200: its body, the server's processes and their states
    /// (`T`: stopped; a backend left running answers the daemon's calls), and the daemon's log without its trace lines.
    static func explainStillReady(_ rig: Rig, _ cluster: TemporaryCluster) async throws {
        let body = String(decoding: try await rig.get("/readyz").body, as: UTF8.self)
        let log = rig.log.split(separator: "\n").filter { !$0.contains("level=trace") }.suffix(60).joined(separator: "\n")
        print("/readyz stayed 200: \(body)\nserver processes (port \(cluster.port)):\n\(cluster.processStates())\ndaemon log:\n\(log)")
    }

    @Test func databaseFrozen_withDefaultTimeouts_notReadyWithinSeconds() async throws {
        let cluster = try TemporaryCluster()
        defer { cluster.stop() }
        try cluster.start()
        try Self.prepare(cluster.conninfo)
        let rig = try Rig(databaseURL: cluster.conninfo, extra: ["SHUTDOWN_TIMEOUT": "5s"])
        defer { rig.stop() }
        #expect(try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 30).contains("READY=1"))
        #expect(try await rig.get("/readyz").status == 200)
        #expect(cluster.freeze(), "some server processes still run:\n\(cluster.processStates())")
        let frozenAt = ContinuousClock.now
        let noticed503 = try await eventually("/readyz answers 503", timeout: .seconds(20), every: .milliseconds(200)) {
            try await rig.get("/readyz").status == 503
        }
        if !noticed503 { try await Self.explainStillReady(rig, cluster) }
        let noticed = ContinuousClock.now - frozenAt
        // A status round every 5 s, its probe giving up after 3 s: up to about 8 s; the point is "not the pool's 45 s".
        #expect(noticed < .seconds(15), "readiness noticed the frozen database after \(noticed)")
        #expect(String(decoding: try await rig.get("/readyz").body, as: UTF8.self).contains("no answer from the database within"))
        #expect(try await rig.get("/healthz").status == 200)
        cluster.thaw()
    }

    @Test func databaseFrozenAfterReady_notReadyInBoundedTime_andSIGTERMExitsZero() async throws {
        let cluster = try TemporaryCluster()
        defer { cluster.stop() }
        try cluster.start()
        try Self.prepare(cluster.conninfo)
        let rig = try Rig(databaseURL: cluster.conninfo, extra: ["DATABASE_STATEMENT_TIMEOUT": "2s", "SHUTDOWN_TIMEOUT": "5s"])
        defer { rig.stop() }
        let ready = try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 30)
        #expect(ready.contains("READY=1"))
        #expect(try await rig.get("/readyz").status == 200)

        #expect(cluster.freeze(), "some server processes still run:\n\(cluster.processStates())")
        let noticed = try await eventually("/readyz answers 503 with the database frozen", timeout: .seconds(30), every: .milliseconds(200)) {
            try await rig.get("/readyz").status == 503
        }
        if !noticed { try await Self.explainStillReady(rig, cluster) }
        #expect(try await rig.get("/healthz").status == 200)
        // The readiness probe gives up after its own 3 s, which can come before the first of the worker's calls
        // reaches 1.5 × 2 s; wait for the worker to end one of its own calls before stopping it.
        try await eventually("a call to the frozen database is ended by the worker", timeout: .seconds(20), every: .milliseconds(200)) {
            rig.log.contains("no answer from the server within")
        }
        let clock = ContinuousClock()
        let started = clock.now
        #expect(await rig.terminate() == 0)
        let took = clock.now - started
        #expect(took < .seconds(5) + .milliseconds(900), "SIGTERM to exit took \(took)")
        print("frozen database after ready: SIGTERM to exit \(took) (SHUTDOWN_TIMEOUT 5s)")
    }

    /// SIGTERM a few milliseconds after READY=1 (a deploy right after a start): every loop sees the stop even if it
    /// was in the middle of its first pass, so the daemon exits promptly and never needs the last-resort deadline.
    @Test func sigtermRightAfterReady_exitsPromptly() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            for round in 0..<8 {
                let rig = try Rig(databaseURL: conninfo, extra: ["SHUTDOWN_TIMEOUT": "5s"])
                defer { rig.stop() }
                let ready = try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20)
                #expect(ready.contains("READY=1"))
                try await Task.sleep(for: .milliseconds(round * 3))
                let clock = ContinuousClock()
                let started = clock.now
                #expect(await rig.terminate() == 0)
                let took = clock.now - started
                // The deadline exit would come at 4.75 s; the log line below is what proves it was not needed.
                #expect(took < .milliseconds(4500), "round \(round): SIGTERM to exit took \(took)")
                #expect(!rig.log.contains("shutdown deadline passed"), "round \(round) needed the deadline exit")
            }
        }
    }

    /// Issue 45, 54: libpq quotes the part of a connection string it cannot parse. A password with a raw `%` and a space
    /// (URI form: `invalid percent-encoded token: "<password>"`; key=value form: `missing "=" after "<its second
    /// word>"`) is refused at start, checked by libpq's own parser: exit 78 naming DATABASE_URL, the password in no
    /// output (it used to be retried for ever). A database that is only unreachable keeps the daemon up, `/readyz`
    /// showing the error's kind and SQLSTATE only; the daemon runs with core dumps off (RLIMIT_CORE 0).
    @Test func passwordInABadDatabaseURL_isRefusedAtStartUnechoed_andAnUnreachableOneShowsInReadyz() async throws {
        for url in ["postgresql://worker:s3cr%t pa55word@127.0.0.1:1/app", "host=127.0.0.1 port=1 user=worker password=s3cr%t pa55word dbname=app"] {
            let rig = try Rig(databaseURL: url)
            defer { rig.stop() }
            #expect(await rig.exitStatus() == 78)
            let log = rig.log
            #expect(log.contains("DATABASE_URL: libpq cannot parse it"), "\(log)")
            for secret in ["s3cr", "pa55word"] { #expect(!log.contains(secret), "the output shows \(secret): \(log)") }
            print("bad DATABASE_URL \(url.hasPrefix("postgresql") ? "URI" : "key=value"): \(log.split(separator: "\n").first { $0.contains("DATABASE_URL") } ?? "")")
        }
        let rig = try Rig(databaseURL: "postgresql://worker:s3cret-pa55word@127.0.0.1:1/app")
        defer { rig.stop() }
        try await eventually("/readyz reports the database", timeout: .seconds(10), every: .milliseconds(100)) {
            (try? await rig.get("/readyz")).map { String(decoding: $0.body, as: UTF8.self).contains(#""database":"down: postgres"#) } ?? false
        }
        let body = String(decoding: try await rig.get("/readyz").body, as: UTF8.self)
        #expect(body.contains(#""database":"down: postgres connectionFailed (details in the journal)""#), "\(body)")
        let limits = (try? String(contentsOfFile: "/proc/\(rig.process.processIdentifier)/limits", encoding: .utf8)) ?? ""
        #expect(limits.split(separator: "\n").contains { $0.hasPrefix("Max core file size") && $0.split(separator: " ").filter { $0 == "0" }.count == 2 },
                "\(limits)")
        #expect(await rig.terminate() == 0)
        let log = rig.log
        #expect(log.contains("database unavailable; retrying"))
        #expect(!body.contains("pa55word") && !log.contains("pa55word"), "\(body)\n\(log)")
    }

    /// Issue 54: a caregiver's app registered a token carrying `ESC [2J`, `ESC ]0;…BEL` and a carriage return, and wrote
    /// escape codes into a `recordingGroupId` and a `slot`. FCM answers the token UNREGISTERED and the slot sends its event
    /// DEAD: the daemon's whole output holds no control byte but the newlines between entries, shows the token's ends
    /// escaped, and names the events by outbox id, never by key.
    @Test func hostileToken_answeredUnregistered_leavesNoControlByteInTheLog() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
            let token = "unregistered-\u{1B}[2J" + String(repeating: "D", count: 40) + "\u{1B}]0;pwned\u{7}\r\u{1B}c"
            try await db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', 'Hanako')"#)
            try await db.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l1', 'c1', 'p1', \#(literal: LinkStatus.active))"#)
            // A healthy device beside it: FCM's answers to it vouch that the project is sound, so the dead token is disabled.
            try await db.query(#"""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d0', \#(literal: OwnerType.caregiver), 'c1', 'fcm-token-healthy-0123456789'),
                                                                                ('d1', \#(literal: OwnerType.caregiver), 'c1', \#(token))
                """#)
            let rig = try Rig(databaseURL: conninfo)
            defer { rig.stop() }
            _ = try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20)
            let sent = Int64(try await db.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload) VALUES ('DOSE_TAKEN', 'p1',
                '{"date":"2026-02-11","slot":"noon","recordingGroupId":"grp-\u001b[2J-\u009b31m","withinTime":false,"isPrn":false,"takenAt":"2026-02-11T12:00:00+09:00"}')
                RETURNING id
                """#)[0]["id"].int())
            let dead = Int64(try await db.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload) VALUES ('DOSE_TAKEN', 'p1',
                '{"date":"2026-02-11","slot":"noon\r\u001b]0;x\u0007","withinTime":false,"isPrn":false,"takenAt":"2026-02-11T12:00:00+09:00"}')
                RETURNING id
                """#)[0]["id"].int())
            do {
                try await eventually("both events are settled", timeout: .seconds(10), every: .milliseconds(100)) {
                    try await db.query(#"SELECT count(*) FILTER (WHERE status IN (\#(literal: OutboxStatus.done), \#(literal: OutboxStatus.dead))) = 2 AS ok FROM "PushOutbox""#)[0]["ok"].bool()
                }
            } catch {
                Issue.record("\(error); the daemon's log:\n\(Printable.lines(rig.log))")
            }
            #expect(try await db.query(#"SELECT status FROM "PushDelivery" WHERE "pushDeviceId" = 'd1'"#).map { try $0["status"].string() } == ["FAILED"])
            #expect(await rig.terminate() == 0)

            let bytes = try Data(contentsOf: URL(fileURLWithPath: rig.stderrPath))
            let log = String(decoding: bytes, as: UTF8.self)
            #expect(!bytes.contains { ($0 < 0x20 && $0 != 0x0A) || $0 == 0x7F }, "\(log)")
            #expect(!log.unicodeScalars.contains { (0x80...0x9F).contains($0.value) })
            let line = try #require(log.split(separator: "\n").first { $0.contains("device token is no longer valid") })
            #expect(line.contains(#"device.token="unregi…\u{7}\r\u{1B}c""#), "\(line)")
            #expect(line.split(separator: " ").contains("outbox.id=\(sent)"), "\(line)")
            let refused = try #require(log.split(separator: "\n").first { $0.contains("outbox event refused") })
            #expect(refused.contains(#"payload.slot \"noon\r\u{1B}]0;x\u{7}\""#), "\(refused)")
            #expect(refused.split(separator: " ").contains("outbox.id=\(dead)"), "\(refused)")
            #expect(!log.contains("grp-") && !log.contains("doseTaken:"), "\(log)")
            print("hostile token, the daemon's log line: \(line)")
        }
    }

    /// Issue 45: 2,000 connections that trickle a request from one address and an endless chunked POST from another
    /// leave the daemon (at systemd's default soft limit of 1,024 descriptors) able to work: `/readyz` answers from a
    /// third address, a push goes out, the POST is refused from its headers, and the daemon's descriptors stay few.
    /// The 2,000 connections are held by a child (`HeldConnections`): this test process stays below FD_SETSIZE.
    @Test func healthFlood_slowConnectionsAndAnEndlessPost_readyzAnswersAndAPushIsDelivered() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
            try await db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', 'name')"#)
            try await db.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l1', 'c1', 'p1', \#(literal: LinkStatus.active))"#)
            try await db.query(#"INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d1', \#(literal: OwnerType.caregiver), 'c1', 'flood-token')"#)
            let rig = try Rig(databaseURL: conninfo, openFileLimit: 1024)
            defer { rig.stop() }
            #expect(try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20).contains("READY=1"))

            // Each sends the start of a request and never the rest.
            let slow = try HeldConnections(port: rig.healthPort, count: 2000, from: "127.0.0.2", sending: "GET /readyz HTTP/1.1\r\nHost: flood\r\n")
            defer { slow.stop() }
            #expect(try await slow.opened() == 2000)
            let post = EndlessPost(port: rig.healthPort, from: "127.0.0.3")
            defer { post.stop() }

            try await eventually("/readyz answers 200 during the flood", timeout: .seconds(20), every: .milliseconds(200)) {
                (try? await rig.get("/readyz").status) == 200
            }
            try await db.query(Fixtures.enqueueQuery(patient: "p1", payload: Fixtures.noonPayload(group: "g-flood")))
            try await eventually("the push is delivered during the flood", timeout: .seconds(20), every: .milliseconds(100)) {
                rig.emulator.receivedMessages.map(\.token) == ["flood-token"]
            }
            try await eventually("the endless POST is answered", timeout: .seconds(5), every: .milliseconds(100)) { post.answer.contains("\r\n\r\n") }
            #expect(post.answer.hasPrefix("HTTP/1.1 405"), "answer: \(post.answer.prefix(200))")
            let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(rig.process.processIdentifier)/fd").count) ?? -1
            #expect(descriptors > 0 && descriptors < 300, "the daemon holds \(descriptors) descriptors during the flood")
            #expect(try await rig.get("/healthz").status == 200)
        }
    }

    /// Issue 54: `GET /healthz` with `Content-Length: 4000000000` then `Content-Length: 0`, followed by 128 MiB of zeros
    /// on one connection. libmicrohttpd frames by the first, the old check read the last, and the daemon kept the body
    /// (RSS +300 MB). Now the health server answers 400 from the headers, closes the connection, and the daemon's
    /// resident memory stays within a few MB. No database is needed: the endpoint answers while it is unreachable.
    @Test func duplicateContentLengthFlood_isRefusedFromTheHeaders_closed_andRSSStaysFlat() async throws {
        let rig = try Rig(databaseURL: "postgresql://worker@127.0.0.1:1/app")
        defer { rig.stop() }
        try await eventually("/healthz answers", timeout: .seconds(10), every: .milliseconds(100)) { (try? await rig.get("/healthz")) != nil }
        // VmHWM is the peak: a body kept and freed again when the connection ends still shows.
        let pid = rig.process.processIdentifier
        let before = (rss: Self.memoryKiB(pid, "VmRSS"), peak: Self.memoryKiB(pid, "VmHWM"))
        let flood = 128 << 20
        let outcome = RawClients.flood(port: rig.healthPort,
                                       head: "GET /healthz HTTP/1.1\r\nHost: health\r\nContent-Length: 4000000000\r\nContent-Length: 0\r\n\r\n",
                                       bytes: flood, seconds: 20)
        let after = (rss: Self.memoryKiB(pid, "VmRSS"), peak: Self.memoryKiB(pid, "VmHWM"))
        print("duplicate Content-Length flood: answer \(outcome.answer.split(separator: "\r\n").first ?? "none"), server closed: \(outcome.closedByServer), "
              + "\(outcome.sent) of \(flood) bytes taken; VmRSS \(before.rss) kB before, \(after.rss) kB after; VmHWM \(before.peak) kB before, \(after.peak) kB after")
        #expect(outcome.answer.hasPrefix("HTTP/1.1 400") || outcome.answer.hasPrefix("HTTP/1.1 413"), "answer: \(outcome.answer.prefix(200))")
        #expect(outcome.closedByServer)
        #expect(before.peak > 0 && after.peak - before.peak < 8 * 1024, "peak VmHWM grew from \(before.peak) kB to \(after.peak) kB")
        #expect(after.rss - before.rss < 8 * 1024, "VmRSS grew from \(before.rss) kB to \(after.rss) kB")
        #expect(try await rig.get("/healthz").status == 200)
    }

    /// A memory field of /proc/PID/status (`VmRSS`, `VmHWM`: the peak resident memory), in kB; 0 when unreadable.
    static func memoryKiB(_ pid: Int32, _ field: String) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("\(field):") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// A chunked POST that sends a chunk every 10 ms until stopped or closed, on a thread of its own; keeps what it is answered.
    final class EndlessPost: Sendable {
        private let fd: Int32
        private let running = Mutex(true)
        private let received = Mutex("")
        private let done = DispatchSemaphore(value: 0)

        init(port: UInt16, from source: String) {
            fd = RawClients.connect(port: port, from: source)
            let thread = Thread { [self] in
                defer { done.signal() }
                guard RawClients.wait(fd, events: Int16(POLLOUT), milliseconds: 5000) else { return }
                RawClients.send(fd, "POST /readyz HTTP/1.1\r\nHost: flood\r\nTransfer-Encoding: chunked\r\n\r\n")
                let chunk = "400\r\n" + String(repeating: "x", count: 1024) + "\r\n"
                while running.withLock({ $0 }) {
                    if RawClients.wait(fd, events: Int16(POLLIN), milliseconds: 0) {
                        let text = RawClients.read(fd, seconds: 0.5)
                        received.withLock { $0 += text }
                    }
                    if RawClients.send(fd, chunk) < 0, errno != EAGAIN { break }
                    usleep(10_000)
                }
            }
            thread.start()
        }

        /// What the server sent back so far.
        var answer: String { received.withLock { $0 } }

        func stop() {
            running.withLock { $0 = false }
            done.wait()
            close(fd)
        }
    }

    static func prepare(_ conninfo: String) throws {
        let admin = try PostgresConnection(conninfo: conninfo)
        try TestDatabase.createAPITables(admin)
        _ = try Migrator.migrate(admin)
    }
}
