import FCM
import FCMEmulator
import Foundation
import Lifecycle
import Outbox
import Postgres
import Push
import Synchronization
import TestSupport
import Testing

/// The real engine, the real FCM sender and PostgreSQL against the emulator answering SENDER_ID_MISMATCH
/// (SPEC §3 "A wrong key is not evidence against the fleet").
@Suite("Delivery engine: a wrong key and a stale token (emulator)", .blockingFixtures)
struct SenderMismatchFleetTests {
    static func count(_ db: Fixtures, _ query: PostgresQuery) throws -> Int { try db.connection.query(query)[0]["n"].int() }

    static func pausedForWrongKey(_ health: FCMHealth) -> Bool {
        if case .paused(.project, let reason) = health { reason.contains("SENDER_ID_MISMATCH") } else { false }
    }

    /// A key of another project after a healthy start: every send of a 120-device fleet answers SENDER_ID_MISMATCH, and
    /// so does the dry run to a token that received a push. Nothing is disabled, nothing FAILED, sending pauses naming
    /// SENDER_ID_MISMATCH; once FCM accepts the key, with no restart, every delivery is SENT exactly once.
    @Test func wrongKey_fleetOf120_disablesNothing_pauses_andDeliversEverythingOnceFixed() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let health = Recorder<FCMHealth>()
            try await withEmulatorSender(knownGood: conninfo, onHealth: { state in health.record(state) }) { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: (0..<120).map { "fleet-\($0)" })
                // A deployment that has delivered: the database knows tokens FCM accepted.
                try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "warm"))
                let stop = StopSignal()
                let engine = FCMFaultTests.engine(conninfo, sender: sender, maxInFlight: 20, stop: stop)
                let running = Task { await engine.run(until: stop) }
                try await eventually("the first event is DONE", timeout: .seconds(30)) {
                    try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#) == 1
                }
                emulator.setProjectFault(.senderIdMismatch)
                for group in 0..<2 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }

                try await eventually("an instance pauses for the wrong key", timeout: .seconds(30)) { health.all.contains(where: Self.pausedForWrongKey) }
                try await eventually("a delivery records SENDER_ID_MISMATCH", timeout: .seconds(30)) {
                    try Self.count(db, #"SELECT count(*) AS n FROM "PushDelivery" WHERE "lastError" = 'PROJECT_FAULT: SENDER_ID_MISMATCH'"#) > 0
                }
                // A few probes' worth of the fault.
                try await Task.sleep(for: .seconds(3))
                #expect(health.all.last.map(Self.pausedForWrongKey) == true)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 0)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.failed)"#) == 0)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#) == 1)
                // The 20 on the wire, the dry runs for their answers (one for those before it began, one for those that
                // came while it ran: a dry run judges only the answers before it), and a few seconds of probes.
                #expect((emulator.stats.sendsByOutcome["project_sender_id_mismatch"] ?? 0) <= 20 + 7)

                emulator.setProjectFault(nil)
                try await eventually("every event is DONE", timeout: .seconds(60)) {
                    try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#) == 3
                }
                stop.request(grace: .seconds(5))
                await running.value
                let deliveries = try db.deliveries()
                #expect(deliveries.count == 360)
                #expect(deliveries.allSatisfy { $0.status == .sent })
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 0)
                #expect(emulator.stats.distinctAccepted == 360)
                #expect(emulator.stats.duplicates == 0)
                #expect(health.last == .ok)
            }
        }
    }

    /// One stale token (registered with another sender) among twenty healthy devices: it is disabled, the twenty
    /// get every push, and sending never pauses.
    @Test func staleTokenAmongTwentyHealthy_isDisabled_theRestSent_noPause() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let health = Recorder<FCMHealth>()
            try await withEmulatorSender(knownGood: conninfo, onHealth: { state in health.record(state) }) { sender, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: (0..<20).map { "good-\($0)" } + ["mismatch-stale"])
                for group in 0..<3 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                let stop = StopSignal()
                let engine = FCMFaultTests.engine(conninfo, sender: sender, maxInFlight: 20, stop: stop)
                let running = Task { await engine.run(until: stop) }
                try await eventually("all three events are DONE", timeout: .seconds(30)) {
                    try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#) == 3
                }
                stop.request(grace: .seconds(5))
                await running.value

                let disabled = try db.connection.query(#"SELECT token FROM "PushDevice" WHERE NOT "isEnabled""#).map { try $0["token"].string() }
                #expect(disabled == ["mismatch-stale"])
                let good = try Self.count(db, #"""
                    SELECT count(*) AS n FROM "PushDelivery" d JOIN "PushDevice" v ON v.id = d."pushDeviceId"
                    WHERE v.token LIKE 'good-%' AND d.status = \#(literal: DeliveryStatus.sent)
                    """#)
                #expect(good == 60)
                let stale = try db.connection.query(#"""
                    SELECT d.status, d."lastError" FROM "PushDelivery" d JOIN "PushDevice" v ON v.id = d."pushDeviceId"
                    WHERE v.token = 'mismatch-stale'
                    """#)
                #expect(!stale.isEmpty)
                #expect(try stale.allSatisfy { try $0["status"].decode(DeliveryStatus.self) == .failed })
                #expect(emulator.stats.distinctAccepted == 60)
                #expect(!health.all.contains { if case .paused = $0 { true } else { false } })
            }
        }
    }
}
