import FCMEmulator
import Foundation
import Outbox
import Postgres
import TestSupport
import Testing

/// SPEC §3 "FCM's project quota": `FCM_MAX_SENDS_PER_SECOND` is the project's budget, and instances that start at the
/// same moment (a fleet after a deploy or a reboot) never exceed it between them, before or after they see each other.
/// Two real `run` processes against one emulator that enforces the project's quota; assertions count 429s, not time.
@Suite("FCM budget shared by instances that start together", .blockingFixtures)
struct BudgetShareTests {
    /// FCM allows 40/s; each instance has the project's budget of 36/s. Both start at the same moment over a backlog
    /// that both claim from (a small MAX_IN_FLIGHT leaves work for the other): no send is answered 429, and every
    /// delivery is sent. Before the shares were recorded, each took the whole budget until its first heartbeat saw the
    /// other (72/s for up to 10 s).
    @Test func twoInstancesStartedTogether_neverExceedTheSharedBudget() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
            let devices = 10, events = 30
            try await db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', '山田花子')"#)
            try await db.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l1', 'c1', 'p1', \#(literal: LinkStatus.active))"#)
            try await db.query(#"""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token)
                SELECT 'd' || k, \#(literal: OwnerType.caregiver), 'c1', 'budget-token-' || k FROM generate_series(1, \#(devices)::int) k
                """#)
            try await db.query(#"""
                INSERT INTO "PushOutbox" ("eventType", "patientId", payload)
                SELECT 'DOSE_TAKEN', 'p1', jsonb_build_object('date', '2026-02-11', 'slot', 'noon', 'recordingGroupId', 'g-' || e,
                                                             'withinTime', false, 'isPrn', false, 'takenAt', '2026-02-11T12:00:00+09:00')
                FROM generate_series(1, \#(events)::int) e
                """#)

            let fixtures = TLSFixtures.shared
            let keys = try fixtures.rsaKeyPair()
            var configuration = fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM)
            configuration.projectQuota = (rate: 40, burst: 10)
            let emulator = try FCMEmulator(configuration: configuration)
            defer { emulator.stop() }
            let settings = ["FCM_MAX_SENDS_PER_SECOND": "36", "MAX_IN_FLIGHT": "40", "BATCH_SIZE": "2", "LOG_LEVEL": "info"]
            let first = try DaemonTests.Rig(databaseURL: conninfo, extra: settings, sharing: (emulator, keys.privatePEM))
            defer { first.stop() }
            let second = try DaemonTests.Rig(databaseURL: conninfo, extra: settings, sharing: (emulator, keys.privatePEM))
            defer { second.stop() }

            func quota429s() -> Int { emulator.stats.sendsByOutcome["project_quota_exceeded"] ?? 0 }
            // Until every delivery is sent, or the first 429 (after which FCM's pause would hold sending for a minute).
            try await eventually("every delivery sent, or a 429", timeout: .seconds(90), every: .milliseconds(200)) {
                let sent = try await db.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.sent)"#)[0]["n"].int()
                return sent == devices * events || quota429s() > 0
            }
            #expect(quota429s() == 0, "answers 429: \(quota429s()); sends by outcome: \(emulator.stats.sendsByOutcome)")
            let sent = try await db.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.sent)"#)[0]["n"].int()
            #expect(sent == devices * events)
            // Both instances took part: each logged the share it took.
            #expect(first.log.contains("FCM send budget shared") && second.log.contains("FCM send budget shared"))
            #expect(await first.terminate() == 0)
            #expect(await second.terminate() == 0)
        }
    }
}
