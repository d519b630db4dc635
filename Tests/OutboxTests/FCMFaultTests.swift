import FCM
import FCMEmulator
import Foundation
@testable import Lifecycle
import Logging
import Metrics
import Outbox
import Postgres
import Push
import Synchronization
import TestSupport
import Testing
import Timekeeping

@Suite("Delivery engine under project-wide FCM faults (emulator)", .blockingFixtures)
struct FCMFaultTests {
    static func engine(_ conninfo: String, sender: any PushSender, maxInFlight: Int, stop: StopSignal) -> DeliveryEngine {
        var configuration = DeliveryEngineConfiguration()
        configuration.maxInFlight = maxInFlight
        configuration.batchSize = 20
        configuration.pollInterval = .milliseconds(100)
        configuration.backoff = Backoff(base: .milliseconds(200), cap: .seconds(1))
        return DeliveryEngine(client: PostgresClient(conninfo: conninfo), sender: sender, configuration: configuration,
                              logger: Logger(label: "outbox", sink: MemorySink()), metrics: MetricsRegistry())
    }

    /// During a project fault: no device disabled, no delivery settled, no event finished.
    static func expectNothingDisabledSettledOrFinished(_ db: Fixtures) throws {
        let during = try db.connection.query(#"""
            SELECT (SELECT count(*) FROM "PushDevice" WHERE NOT "isEnabled") AS disabled,
                   (SELECT count(*) FROM "PushDelivery" WHERE status <> \#(literal: DeliveryStatus.pending)) AS settled,
                   (SELECT count(*) FROM "PushOutbox" WHERE status <> \#(literal: OutboxStatus.pending)) AS finished
            """#)[0]
        #expect(try during["disabled"].int() == 0)
        #expect(try during["settled"].int() == 0)
        #expect(try during["finished"].int() == 0)
    }

    /// A misrouted FCM_BASE_URL (a proxy's HTML 404) or a project without the FCM role (403): nothing is disabled,
    /// nothing FAILED, readiness says why; once fixed, every push is delivered exactly once.
    @Test(arguments: [FCMEmulator.ProjectFault.htmlNotFound, .permissionDenied])
    func projectFault_disablesNothingAndDeliversOnceFixed(fault: FCMEmulator.ProjectFault) async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let health = Recorder<FCMHealth>()
            try await withEmulatorSender(onHealth: { state in health.record(state) }) { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: ["token-a", "token-b"])
                for group in 0..<5 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                emulator.setProjectFault(fault)
                let stop = StopSignal()
                let engine = Self.engine(conninfo, sender: sender, maxInFlight: 10, stop: stop)
                let running = Task { await engine.run(until: stop) }

                try await eventually("the engine pauses for the project fault", timeout: .seconds(30)) { health.all.contains { if case .paused(.project, _) = $0 { true } else { false } } }
                try await eventually("a delivery records the PROJECT_FAULT", timeout: .seconds(30)) {
                    try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE "lastError" LIKE 'PROJECT_FAULT%'"#)[0]["n"].int() > 0
                }
                try Self.expectNothingDisabledSettledOrFinished(db)

                emulator.setProjectFault(nil)
                try await eventually("all five events are DONE", timeout: .seconds(30)) {
                    try db.connection.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#)[0]["n"].int() == 5
                }
                stop.request(grace: .seconds(5))
                await running.value
                #expect(try db.deliveries().allSatisfy { $0.status == .sent })
                #expect(emulator.stats.distinctAccepted == 10)
                #expect(emulator.stats.duplicates == 0)
                #expect(health.last == .ok)
            }
        }
    }

    /// FCM is down (503) when ten doses are recorded, and the patient revokes the caregiver while the pushes wait: the
    /// sends parked through the pause are given back and their recipients decided anew, so none of them reaches the
    /// revoked caregiver once FCM answers again (SPEC §3 "Recipients are decided when the push leaves").
    @Test func aLinkRevokedDuringAnOutage_heldSendsDoNotGoOutWhenFCMRecovers() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let health = Recorder<FCMHealth>()
            try await withEmulatorSender(onHealth: { state in health.record(state) },
                                         configure: { $0.maxParkedThroughPause = .seconds(1) }) { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: ["token-a"])
                try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "first"))
                emulator.setProjectFault(.unavailable(retryAfterSeconds: 1))
                let stop = StopSignal()
                let engine = Self.engine(conninfo, sender: sender, maxInFlight: 20, stop: stop)
                let running = Task { await engine.run(until: stop) }
                try await eventually("the engine pauses for the outage", timeout: .seconds(30)) {
                    health.all.contains { if case .paused = $0 { true } else { false } }
                }
                // Doses recorded during the outage: claimed and fanned out while the link is ACTIVE, then parked.
                for group in 0..<9 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                try await eventually("the ten events are fanned out", timeout: .seconds(30)) {
                    try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery""#)[0]["n"].int() == 10
                }
                try db.connection.query(#"UPDATE "CaregiverPatientLink" SET status = \#(literal: LinkStatus.revoked)"#)
                try await Task.sleep(for: .milliseconds(1500))  // every parked send is now older than maxParkedThroughPause
                emulator.setProjectFault(nil)
                try await eventually("all ten events are DONE", timeout: .seconds(30)) {
                    try db.connection.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#)[0]["n"].int() == 10
                }
                stop.request(grace: .seconds(5))
                await running.value
                #expect(emulator.stats.distinctAccepted == 0)
                let deliveries = try db.connection.query(#"SELECT status, "lastError" FROM "PushDelivery""#)
                #expect(deliveries.count == 10)
                for row in deliveries {
                    #expect(try row["status"].decode(DeliveryStatus.self) == .failed)
                    #expect(row["lastError"].optionalString() == EventFate.linkNotActiveBeforeSend)
                }
            }
        }
    }

    /// Google refuses the service account from before the engine starts (400 invalid_grant): nothing FAILED or
    /// disabled, token requests stay within 10 a minute; once Google accepts it again, every push goes out once.
    @Test func tokenEndpointRefusingFromTheStart_failsNothing_andDeliversOnceItAccepts() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await withEmulatorSender { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: ["token-a", "token-b"])
                for group in 0..<5 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                emulator.refuseTokens()
                let stop = StopSignal()
                let engine = Self.engine(conninfo, sender: sender, maxInFlight: 10, stop: stop)
                let running = Task { await engine.run(until: stop) }
                try await eventually("a delivery records OAUTH_TOKEN_UNAVAILABLE", timeout: .seconds(30)) {
                    try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE "lastError" = 'OAUTH_TOKEN_UNAVAILABLE'"#)[0]["n"].int() > 0
                }
                try await Task.sleep(for: .seconds(4))
                try Self.expectNothingDisabledSettledOrFinished(db)
                #expect(emulator.stats.tokenRequests <= 3, "\(emulator.stats.tokenRequests) token requests in the first seconds of refusal")
                #expect(emulator.stats.distinctAccepted == 0)

                emulator.refuseTokens(nil)
                try await eventually("all five events are DONE", timeout: .seconds(60)) {
                    try db.connection.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#)[0]["n"].int() == 5
                }
                stop.request(grace: .seconds(5))
                await running.value
                #expect(try db.deliveries().allSatisfy { $0.status == .sent })
                #expect(emulator.stats.distinctAccepted == 10)
                #expect(emulator.stats.duplicates == 0)
            }
        }
    }

    /// FCM answers 503 with Retry-After to everything: the sender pauses as a whole and probes, so the
    /// requests during the outage stay within a few probes of the in-flight bound; after recovery all
    /// 100 pushes are delivered exactly once.
    @Test func projectWideOutage_pausesInsteadOfHammering() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await withEmulatorSender(maxInFlight: 10) { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: ["token-a"])
                for group in 0..<100 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                emulator.setProjectFault(.unavailable(retryAfterSeconds: 1))
                let stop = StopSignal()
                let engine = Self.engine(conninfo, sender: sender, maxInFlight: 10, stop: stop)
                let running = Task { await engine.run(until: stop) }
                // The outage, as seen by FCM: 4 s from the first request it refused.
                try await eventually("the emulator answers project_unavailable", timeout: .seconds(30)) { (emulator.stats.sendsByOutcome["project_unavailable"] ?? 0) > 0 }
                try await Task.sleep(for: .seconds(4))
                let duringOutage = emulator.stats.sendsByOutcome["project_unavailable"] ?? 0
                emulator.setProjectFault(nil)
                #expect(duringOutage >= 10)
                // 10 in flight, up to 5 more before the pause opens, then one probe a second.
                #expect(duringOutage <= 10 + 5 + 6, "requests during the outage: \(duringOutage)")
                try await eventually("all 100 events are DONE", timeout: .seconds(60)) {
                    try db.connection.query(#"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#)[0]["n"].int() == 100
                }
                stop.request(grace: .seconds(5))
                await running.value
                #expect(emulator.stats.distinctAccepted == 100)
                #expect(emulator.stats.duplicates == 0)
            }
        }
    }
}
