import FCM
import FCMEmulator
import HTTP
import Foundation
@testable import Lifecycle
import Logging
import Metrics
@testable import Outbox
import Postgres
import Push
import Synchronization
import TestSupport
import Testing
import Timekeeping

/// Every answer that would disable a device gets the brake, fleet-wide (SPEC §3 "The same holds for every answer that
/// would disable a device"): three instances (engines with a sender each) on one database and one emulator.
@Suite("Delivery engine: the disable brake across a fleet (emulator)", .blockingFixtures)
struct DisableBrakeFleetTests {
    static func count(_ db: Fixtures, _ query: PostgresQuery) throws -> Int { try db.connection.query(query)[0]["n"].int() }

    static func pausedForNotFound(_ health: FCMHealth) -> Bool {
        if case .paused(.project, let reason) = health { reason.hasPrefix("NOT_FOUND from most devices") } else { false }
    }

    /// One instance of the fleet: its sender (with its own brake), what it told `/readyz` and what it logged.
    struct Instance: Sendable {
        /// What the instance told `/readyz` and what it logged.
        final class Heard: Sendable {
            let health = Recorder<FCMHealth>()
            let log = MemorySink()
        }

        let sender: FCMSender
        let heard: Heard
    }

    /// `count` senders, as `count` worker processes would have, all sending to one emulator.
    static func withInstances(_ count: Int, _ body: ([Instance], FCMEmulator) async throws -> Void) async throws {
        let fixtures = TLSFixtures.shared
        let keys = try fixtures.rsaKeyPair()
        var configuration = fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM)
        configuration.clientEmail = "worker@test-project.iam.gserviceaccount.com"
        let emulator = try FCMEmulator(configuration: configuration)
        defer { emulator.stop() }
        let file = try fixtures.serviceAccountFile(privateKeyPEM: keys.privatePEM, tokenURI: emulator.tokenURI)
        var instances: [Instance] = []
        defer { for instance in instances { instance.sender.shutdown() } }
        for _ in 0..<count {
            let account = try ServiceAccount.load(path: file)
            let heard = Instance.Heard()
            let sender = try FCMSender(configuration: FCMConfiguration(serviceAccount: account, baseURL: emulator.baseURL,
                                                                       http: HTTPClientConfiguration(maxInFlight: 20, caFile: fixtures.caFile)),
                                       logger: Logger(label: "fcm", sink: heard.log), metrics: MetricsRegistry(),
                                       onHealth: { state in heard.health.record(state) })
            instances.append(Instance(sender: sender, heard: heard))
        }
        try await body(instances, emulator)
    }

    /// One event claimed at a time, so the fleet's instances share the events.
    static func engine(_ conninfo: String, sender: any PushSender, stop: StopSignal) -> DeliveryEngine {
        var configuration = DeliveryEngineConfiguration()
        configuration.maxInFlight = 20
        configuration.batchSize = 1
        configuration.pollInterval = .milliseconds(100)
        configuration.backoff = Backoff(base: .milliseconds(200), cap: .seconds(1))
        return DeliveryEngine(client: PostgresClient(conninfo: conninfo), sender: sender, configuration: configuration,
                              logger: Logger(label: "outbox", sink: MemorySink()), metrics: MetricsRegistry())
    }

    /// After a healthy start, FCM answers every send with Google's plain 404 NOT_FOUND (a deleted project, a path a
    /// proxy rewrote). Three instances, 120 devices: at most 10 devices disabled by the whole fleet (each instance alone
    /// would disable 10), every other delivery stays PENDING, each instance pauses naming NOT_FOUND and logs it once at
    /// error level; once FCM answers normally, with no restart, every remaining push goes out exactly once.
    @Test func plainNotFound_fleetOfThree_disablesAtMostTen_pausesNamingIt_andDeliversOnceHealed() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await Self.withInstances(3) { instances, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: (0..<120).map { "fleet-\($0)" })
                // A healthy start on every instance: each sends one event to the 120 devices alone.
                for (index, instance) in instances.enumerated() {
                    try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "healthy-\(index)"))
                    let stop = StopSignal()
                    let engine = Self.engine(conninfo, sender: instance.sender, stop: stop)
                    let running = Task { await engine.run(until: stop) }
                    try await eventually("healthy event \(index) is DONE", timeout: .seconds(30)) {
                        try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = 'DONE'"#) == index + 1
                    }
                    stop.request(grace: .seconds(5))
                    await running.value
                }
                #expect(emulator.stats.distinctAccepted == 360)

                emulator.setProjectFault(.notFound)
                for group in 0..<6 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                let stop = StopSignal()
                let engines = instances.map { Self.engine(conninfo, sender: $0.sender, stop: stop) }
                let running = engines.map { engine in Task { await engine.run(until: stop) } }

                try await eventually("every instance pauses naming NOT_FOUND", timeout: .seconds(30)) {
                    instances.allSatisfy { $0.heard.health.all.contains(where: Self.pausedForNotFound) }
                }
                // A few probes' worth of the fault.
                try await Task.sleep(for: .seconds(3))
                let disabled = try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#)
                #expect(disabled <= 10)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDeviceDisabled""#) == disabled)
                // Only the disabled devices' deliveries FAILED (their other events' too, once retried); the rest wait.
                #expect(try Self.count(db, #"""
                    SELECT count(*) AS n FROM "PushDelivery" pd JOIN "PushDevice" d ON d.id = pd."pushDeviceId"
                    WHERE pd.status = 'FAILED' AND d."isEnabled"
                    """#) == 0)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDelivery" WHERE status = 'PENDING'"#) > 0)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status <> 'DONE' AND status <> 'PENDING'"#) == 0)
                for instance in instances {
                    #expect(instance.heard.health.all.last.map(Self.pausedForNotFound) == true)
                    let errors = instance.heard.log.entries.filter { $0.level == .error }
                    #expect(errors.count == 1)
                    #expect(errors.first?.metadata["fcm.error"]?.hasPrefix("NOT_FOUND from most devices") == true)
                }
                #expect((emulator.stats.sendsByOutcome["project_not_found"] ?? 0) > 0)

                emulator.setProjectFault(nil)
                try await eventually("every event is DONE", timeout: .seconds(60)) {
                    try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = 'DONE'"#) == 9
                }
                stop.request(grace: .seconds(5))
                for task in running { await task.value }
                // Every delivery SENT, except those to the few devices disabled before the cap held.
                let undelivered = try db.connection.query(#"""
                    SELECT count(*) AS n FROM "PushDelivery" pd JOIN "PushDevice" d ON d.id = pd."pushDeviceId"
                    WHERE pd.status <> 'SENT' AND (pd.status <> 'FAILED' OR d."isEnabled")
                    """#)[0]["n"].int()
                #expect(undelivered == 0)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == disabled)
                #expect(emulator.stats.duplicates == 0)
                for instance in instances { #expect(instance.heard.health.last == .ok) }
            }
        }
    }

    /// One stale token of each disabling kind among twenty healthy devices: each is disabled at once, the twenty get
    /// every push, and sending never pauses.
    @Test func staleTokensOfEveryKind_amongTwentyHealthy_areDisabled_noPause() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let health = Recorder<FCMHealth>()
            try await withEmulatorSender(onHealth: { state in health.record(state) }) { sender, emulator in
                let db = try Fixtures(conninfo)
                let stale = ["unregistered-stale", "notfound-stale", "invalid-stale", "mismatch-stale"]
                try db.caredForPatient(tokens: (0..<20).map { "good-\($0)" })
                let stop = StopSignal()
                let engine = FCMFaultTests.engine(conninfo, sender: sender, maxInFlight: 20, stop: stop)
                let running = Task { await engine.run(until: stop) }
                try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "warm"))
                try await eventually("the first event is DONE", timeout: .seconds(30)) {
                    try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = 'DONE'"#) == 1
                }
                for token in stale { try db.device(owner: "c1", token: token) }
                for group in 0..<2 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                try await eventually("all three events are DONE", timeout: .seconds(30)) {
                    try Self.count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = 'DONE'"#) == 3
                }
                stop.request(grace: .seconds(5))
                await running.value

                let disabled = try db.connection.query(#"SELECT token FROM "PushDevice" WHERE NOT "isEnabled" ORDER BY token"#).map { try $0["token"].string() }
                #expect(disabled == stale.sorted())
                let reasons = try db.connection.query(#"SELECT reason FROM "PushDeviceDisabled" ORDER BY reason"#).map { try $0["reason"].string() }
                #expect(reasons == ["INVALID_ARGUMENT", "SENDER_ID_MISMATCH", "UNREGISTERED", "UNREGISTERED"])
                #expect(emulator.stats.distinctAccepted == 60)
                #expect(!health.all.contains { if case .paused = $0 { true } else { false } })
            }
        }
    }

    // MARK: The fleet's count, in the database

    /// Disables `devices` through the flush's statements (the lock, then the disable), as one instance would.
    static func disable(_ client: PostgresClient, _ devices: [String], vouched: Bool) async throws -> [String] {
        let started = Date().addingTimeInterval(3600)
        let rows = try await client.pipelinedTransaction([
            OutboxStore.fleetDisableLockQuery,
            OutboxStore.disableDevicesQuery(ids: devices, started: devices.map { _ in started }, reasons: devices.map { _ in "UNREGISTERED" },
                                            keys: devices.map { _ in "doseTaken:k" }, errors: devices.map { _ in "UNREGISTERED" },
                                            vouched: devices.map { _ in vouched }),
        ])
        return try rows[1].map { try $0["id"].string() }.sorted()
    }

    /// The cap counts every instance's disables in the ledger: a healthy fleet's trickle, vouched for, needs only the
    /// minute's room (10); once a disable in the hour was not vouched for, 10 in the hour of any kind; `devices enable`
    /// frees room.
    @Test func fleetCap_countsTheLedger_vouchedTrickleGoes_unvouchedHoldsTheHour_restoredFreeRoom() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            for index in 0..<40 { try db.device(owner: "c1", token: "t-\(index)", id: String(format: "d-%02d", index)) }
            let client = PostgresClient(conninfo: conninfo)
            let ids = { (range: Range<Int>) in range.map { String(format: "d-%02d", $0) } }
            let backdate = { (interval: String) throws in
                _ = try db.connection.query(#"UPDATE "PushDeviceDisabled" SET "disabledAt" = "disabledAt" - \#(interval)::interval"#)
            }

            // A healthy fleet's dead tokens, vouched for: 10 a minute, however many in the hour.
            #expect(try await Self.disable(client, ids(0..<12), vouched: true) == ids(0..<10))
            try backdate("2 minutes")
            #expect(try await Self.disable(client, ids(10..<15), vouched: true) == ids(10..<15))
            // One not vouched for, with 10 or more disables in the hour: held, the device stays enabled.
            #expect(try await Self.disable(client, ids(15..<16), vouched: false) == [])
            // A fault from a quiet hour: 10 at most, and once one was not vouched for, vouched ones count too.
            try backdate("2 hours")
            #expect(try await Self.disable(client, ids(15..<27), vouched: false) == ids(15..<25))
            try backdate("2 minutes")
            #expect(try await Self.disable(client, ids(25..<27), vouched: true) == [])
            // `devices enable` restores five of those ten: room for five more.
            try db.connection.query(#"UPDATE "PushDeviceDisabled" SET "restoredAt" = now() WHERE "pushDeviceId" BETWEEN 'd-15' AND 'd-19'"#)
            #expect(try await Self.disable(client, ids(25..<32), vouched: false) == ids(25..<30))
            #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 30)
        }
    }

    /// Three instances disabling at the same moment share one count: the lock orders their statements.
    @Test func fleetCap_holdsUnderConcurrentInstances() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            for index in 0..<60 { try db.device(owner: "c1", token: "t-\(index)", id: String(format: "d-%02d", index)) }
            try await withThrowingTaskGroup(of: Int.self) { group in
                for instance in 0..<3 {
                    group.addTask {
                        let client = PostgresClient(conninfo: conninfo)
                        var disabled = 0
                        for batch in 0..<4 {
                            let first = instance * 20 + batch * 5
                            disabled += try await Self.disable(client, (first..<first + 5).map { String(format: "d-%02d", $0) }, vouched: false).count
                        }
                        return disabled
                    }
                }
                var total = 0
                for try await disabled in group { total += disabled }
                #expect(total == 10)
            }
            #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 10)
        }
    }
}
