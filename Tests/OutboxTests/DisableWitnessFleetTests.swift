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

/// A disable needs a witness (SPEC §3): the real engine, the real FCM sender wired to the database's known-good tokens
/// as the daemon wires it, PostgreSQL and the emulator: the small deployment, the fleet's churn, the hostile client,
/// the project fault and the new deployment.
@Suite("Delivery engine: a disable needs a witness (emulator)", .blockingFixtures)
struct DisableWitnessFleetTests {
    static func count(_ db: Fixtures, _ query: PostgresQuery) throws -> Int { try db.connection.query(query)[0]["n"].int() }
    static func done(_ db: Fixtures) throws -> Int { try count(db, #"SELECT count(*) AS n FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)"#) }
    static func disabledTokens(_ db: Fixtures) throws -> [String] {
        try db.connection.query(#"SELECT token FROM "PushDevice" WHERE NOT "isEnabled" ORDER BY token"#).map { try $0["token"].string() }
    }
    static func isPaused(_ health: FCMHealth) -> Bool { if case .paused = health { true } else { false } }

    static func pausedFor(_ answer: String) -> @Sendable (FCMHealth) -> Bool {
        { health in if case .paused(.project, let reason) = health { reason.hasPrefix("\(answer) for a token that received pushes") } else { false } }
    }

    static func pausedWithoutWitness(_ health: FCMHealth) -> Bool {
        if case .paused(.project, let reason) = health { reason.contains("disables without a witness are used up") } else { false }
    }

    /// One instance of the fleet: its sender, what it told `/readyz`, what it logged and counted.
    struct Instance: Sendable {
        final class Heard: Sendable {
            let health = Recorder<FCMHealth>()
            let log = MemorySink()
            let metrics = MetricsRegistry()
        }

        let sender: FCMSender
        let heard: Heard
    }

    /// `count` senders, as `count` worker processes would have, all sending to one emulator, each asking the database
    /// for known-good tokens.
    static func withInstances(_ count: Int, conninfo: String, _ body: ([Instance], FCMEmulator) async throws -> Void) async throws {
        try await withEmulator { emulator, fcm in
            var fcm = fcm
            fcm.knownGoodTokens = knownGoodTokens(conninfo)
            var instances: [Instance] = []
            defer { for instance in instances { instance.sender.shutdown() } }
            for _ in 0..<count {
                let heard = Instance.Heard()
                let sender = try FCMSender(configuration: fcm, logger: Logger(label: "fcm", sink: heard.log), metrics: heard.metrics,
                                           onHealth: { state in heard.health.record(state) })
                instances.append(Instance(sender: sender, heard: heard))
            }
            try await body(instances, emulator)
        }
    }

    /// `batchSize` events claimed at a time (1: the fleet's instances share the events).
    static func engine(_ conninfo: String, sender: any PushSender, batchSize: Int = 1, maxInFlight: Int = 20) -> DeliveryEngine {
        var configuration = DeliveryEngineConfiguration()
        configuration.maxInFlight = maxInFlight
        configuration.batchSize = batchSize
        configuration.pollInterval = .milliseconds(100)
        configuration.backoff = Backoff(base: .milliseconds(200), cap: .seconds(1))
        return DeliveryEngine(client: PostgresClient(conninfo: conninfo), sender: sender, configuration: configuration,
                              logger: Logger(label: "outbox", sink: MemorySink()), metrics: MetricsRegistry())
    }

    /// Runs `engines` until `body` returns.
    static func running(_ engines: [DeliveryEngine], _ body: () async throws -> Void) async throws {
        let stop = StopSignal()
        let tasks = engines.map { engine in Task { await engine.run(until: stop) } }
        do { try await body() } catch {
            stop.request(grace: .seconds(5))
            for task in tasks { await task.value }
            throw error
        }
        stop.request(grace: .seconds(5))
        for task in tasks { await task.value }
    }

    // MARK: The small deployment

    /// One caregiver, one healthy phone and four dead ones (uninstalled, another project's, an invalid token, one whose
    /// token APNs retired: FCM's 400 "APNs device token is disabled."), plus one whose APNs credentials fail: the healthy
    /// phone's 200 witnesses the four, which are disabled in one drain; the event ends DONE; sending never pauses.
    @Test func oneHealthyPhone_witnessesThreeDead_eventDone() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await Self.withInstances(1, conninfo: conninfo) { instances, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: ["good-phone", "unregistered-old", "mismatch-other", "invalid-typo", "apnsdisabled-uninstalled",
                                                "thirdparty-apns"])
                try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "morning"))
                try await Self.running([Self.engine(conninfo, sender: instances[0].sender)]) {
                    try await eventually("the event is DONE", timeout: .seconds(20)) { try Self.done(db) == 1 }
                }
                #expect(try Self.disabledTokens(db) == ["apnsdisabled-uninstalled", "invalid-typo", "mismatch-other", "unregistered-old"])
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDeviceDisabled" WHERE witnessed"#) == 4)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.pending)"#) == 0)
                #expect(emulator.stats.distinctAccepted == 1)
                #expect(!instances[0].heard.health.all.contains(where: Self.isPaused))
            }
        }
    }

    /// A new deployment (no token ever received a push) whose caregiver's two phones were both uninstalled: nothing can
    /// witness, and both are disabled within the fleet's allowance of unwitnessed disables; the event ends DONE.
    @Test func newDeployment_twoDeadPhones_bothDisabled_eventDone() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await Self.withInstances(1, conninfo: conninfo) { instances, _ in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: ["unregistered-a", "unregistered-b"])
                try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "morning"))
                try await Self.running([Self.engine(conninfo, sender: instances[0].sender)]) {
                    try await eventually("the event is DONE", timeout: .seconds(20)) { try Self.done(db) == 1 }
                }
                #expect(try Self.disabledTokens(db) == ["unregistered-a", "unregistered-b"])
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDeviceDisabled" WHERE NOT witnessed"#) == 2)
                #expect(!instances[0].heard.health.all.contains(where: Self.isPaused))
                #expect(instances[0].heard.metrics.value("fcm_disabling_answers_total", labels: ["answer": "UNREGISTERED", "verdict": "unwitnessed"]) == 2)
            }
        }
    }

    // MARK: The fleet

    /// 100 dead tokens among 1,000 healthy phones, interleaved (a fleet's morning churn): all 100 disabled in the
    /// drain, every healthy phone gets its push, and sending never pauses (`/readyz` 200 throughout).
    @Test func hundredDeadAmongThousandHealthy_allDisabled_neverPaused() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await Self.withInstances(1, conninfo: conninfo) { instances, emulator in
                let db = try Fixtures(conninfo)
                let tokens = (0..<1100).map { $0 % 11 == 5 ? "unregistered-\($0)" : "good-\($0)" }
                try db.caredForPatient(tokens: tokens)
                for group in 0..<2 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                try await Self.running([Self.engine(conninfo, sender: instances[0].sender, batchSize: 2, maxInFlight: 100)]) {
                    try await eventually("both events are DONE", timeout: .seconds(60)) { try Self.done(db) == 2 }
                }
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 100)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled" AND token LIKE 'good-%'"#) == 0)
                #expect(emulator.stats.distinctAccepted == 2000)
                #expect(!instances[0].heard.health.all.contains(where: Self.isPaused))
            }
        }
    }

    // MARK: The hostile client

    /// One caregiver's app registers 30 made-up tokens and 5 tokens of another Firebase project beside its real phone,
    /// and its patient records doses among 100 other caregivers' doses: sending never pauses, every other caregiver's
    /// push goes out, and the junk is disabled.
    @Test func madeUpTokens_cannotStopOtherCaregiversPushes_andAreDisabled() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await Self.withInstances(1, conninfo: conninfo) { instances, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatients(100, devicesEach: 1, events: 20)
                try await Self.running([Self.engine(conninfo, sender: instances[0].sender, batchSize: 10)]) {
                    try await eventually("the first 20 doses are DONE", timeout: .seconds(30)) { try Self.done(db) == 20 }
                    try db.patient("hostile-patient")
                    try db.link(caregiver: "hostile", patient: "hostile-patient")
                    try db.device(owner: "hostile", token: "good-hostile-real-phone")
                    for index in 0..<30 { try db.device(owner: "hostile", token: "invalid-junk-\(index)") }
                    for index in 0..<5 { try db.device(owner: "hostile", token: "mismatch-otherproject-\(index)") }
                    for group in 0..<3 { try db.enqueue(patient: "hostile-patient", payload: Fixtures.payload(group: "h\(group)")) }
                    for index in 0..<80 { try db.enqueue(patient: "p\(1 + index % 100)", payload: Fixtures.payload(group: "later-\(index)")) }
                    try await eventually("every dose is DONE", timeout: .seconds(30)) { try Self.done(db) == 103 }
                }
                let junk = try Self.count(db, #"""
                    SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled" AND ("token" LIKE 'invalid-junk-%' OR "token" LIKE 'mismatch-otherproject-%')
                    """#)
                #expect(junk == 35)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 35)
                // 100 earlier + 80 later other caregivers' pushes, and the hostile caregiver's real phone's 3.
                #expect(emulator.stats.distinctAccepted == 103)
                #expect(!instances[0].heard.health.all.contains(where: Self.isPaused))
                #expect(instances[0].heard.metrics.value("fcm_send_paused", labels: ["cause": "SENDER_ID_MISMATCH"]) == 0)
            }
        }
    }

    // MARK: The project fault

    /// After a healthy start, FCM answers every send with Google's plain 404 NOT_FOUND (a deleted project, a path a
    /// proxy rewrote) for 15 s. Three instances: the dry run to a token that received pushes gets NOT_FOUND too, so no
    /// device is disabled, each instance pauses naming NOT_FOUND and logs it once at error level. Once FCM answers
    /// normally, with no restart, every push goes out exactly once, and dead tokens are disabled within 10 s.
    @Test func plainNotFound_fleetOfThree_disablesNothing_pausesNamingIt_andWitnessesAgainOnceHealed() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await Self.withInstances(3, conninfo: conninfo) { instances, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: (0..<120).map { "fleet-\($0)" })
                try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "healthy"))
                try await Self.running([Self.engine(conninfo, sender: instances[0].sender)]) {
                    try await eventually("the healthy event is DONE", timeout: .seconds(30)) { try Self.done(db) == 1 }
                }
                emulator.setProjectFault(.notFound)
                for group in 0..<6 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                try await Self.running(instances.map { Self.engine(conninfo, sender: $0.sender) }) {
                    try await eventually("every instance pauses naming NOT_FOUND", timeout: .seconds(30)) {
                        instances.allSatisfy { $0.heard.health.all.contains(where: Self.pausedFor("NOT_FOUND")) }
                    }
                    try await Task.sleep(for: .seconds(15))
                    #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 0)
                    #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.failed)"#) == 0)
                    #expect(try Self.done(db) == 1)
                    for instance in instances {
                        #expect(instance.heard.health.all.last.map(Self.pausedFor("NOT_FOUND")) == true)
                        let errors = instance.heard.log.entries.filter { $0.level == .error }
                        #expect(errors.count == 1)
                        #expect(errors.first?.metadata["fcm.error"]?.hasPrefix("NOT_FOUND for a token that received pushes") == true)
                        #expect(instance.heard.metrics.value("fcm_send_paused", labels: ["cause": "NOT_FOUND"]) == 1)
                    }

                    emulator.setProjectFault(nil)
                    let healed = ContinuousClock.now
                    for index in 0..<8 { try db.device(owner: "c1", token: "unregistered-after-\(index)") }
                    try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "after"))
                    try await eventually("the dead tokens are disabled", timeout: .seconds(10)) {
                        try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 8
                    }
                    #expect(ContinuousClock.now - healed < .seconds(10))
                    try await eventually("every event is DONE", timeout: .seconds(60)) { try Self.done(db) == 8 }
                }
                #expect(try Self.disabledTokens(db).allSatisfy { $0.hasPrefix("unregistered-after-") })
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDelivery" WHERE status <> \#(literal: DeliveryStatus.sent) AND "lastError" NOT LIKE 'UNREGISTERED%'"#) == 0)
                #expect(emulator.stats.duplicates == 0)
                for instance in instances { #expect(instance.heard.health.last == .ok) }
            }
        }
    }

    /// A key of another project from the first send of a new deployment: nothing can witness, so three instances
    /// together disable at most 10 of 120 devices (the fleet's unwitnessed allowance), nothing else FAILED, and once
    /// the allowance is used up each pauses naming SENDER_ID_MISMATCH and the used-up allowance (no hammering).
    @Test func wrongKeyFromTheStart_newDeployment_fleetOfThree_disablesAtMostTen() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await Self.withInstances(3, conninfo: conninfo) { instances, emulator in
                let db = try Fixtures(conninfo)
                try db.caredForPatient(tokens: (0..<120).map { "fleet-\($0)" })
                emulator.setProjectFault(.senderIdMismatch)
                for group in 0..<6 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
                try await Self.running(instances.map { Self.engine(conninfo, sender: $0.sender) }) {
                    // Once the allowance is used up, each instance pauses as for a project fault and says why.
                    // (An instance that claimed no event sends nothing, so "every" is the ones that sent.)
                    try await eventually("the instances pause: no witness, the allowance used up", timeout: .seconds(30)) {
                        instances.contains { $0.heard.health.all.contains(where: Self.pausedWithoutWitness) }
                    }
                    try await Task.sleep(for: .seconds(3))
                    for instance in instances where instance.heard.health.all.contains(where: Self.pausedWithoutWitness) {
                        #expect(instance.heard.metrics.value("fcm_send_paused", labels: ["cause": "SENDER_ID_MISMATCH"]) == 1)
                        #expect(instance.heard.log.entries.filter { $0.level == .error }.count == 1)
                    }
                }
                let disabled = try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#)
                #expect(disabled <= 10)
                #expect(disabled > 0)
                #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDeviceDisabled""#) == disabled)
                #expect(try Self.count(db, #"""
                    SELECT count(*) AS n FROM "PushDelivery" pd JOIN "PushDevice" d ON d.id = pd."pushDeviceId"
                    WHERE pd.status = \#(literal: DeliveryStatus.failed) AND d."isEnabled"
                    """#) == 0)
            }
        }
    }

    // MARK: The fleet's count, in the database

    /// Disables `devices` through the flush's statements (the lock, then the disable), as one instance would.
    static func disable(_ client: PostgresClient, _ devices: [String], witnessed: Bool) async throws -> [String] {
        let started = Date().addingTimeInterval(3600)
        let rows = try await client.pipelinedTransaction([
            OutboxStore.unwitnessedDisableLockQuery,
            OutboxStore.disableDevicesQuery(ids: devices, started: devices.map { _ in started }, reasons: devices.map { _ in "UNREGISTERED" },
                                            keys: devices.map { _ in "doseTaken:k" }, errors: devices.map { _ in "UNREGISTERED" },
                                            witnessed: devices.map { _ in witnessed }),
        ], settings: .worker(statementTimeout: .seconds(10), lockTimeout: .seconds(5), asynchronousCommit: false))
        return try rows[1].map { try $0["id"].string() }.sorted()
    }

    /// Caregiver c1 of patient p1 with `count` devices, d-00… with tokens t-0….
    static func caregiverWithDevices(_ conninfo: String, count: Int) throws -> Fixtures {
        let db = try Fixtures(conninfo)
        try db.patient("p1")
        try db.link(caregiver: "c1", patient: "p1")
        for index in 0..<count { try db.device(owner: "c1", token: "t-\(index)", id: String(format: "d-%02d", index)) }
        return db
    }

    static func deviceIds(_ range: Range<Int>) -> [String] { range.map { String(format: "d-%02d", $0) } }

    /// Witnessed disables are never counted or held, however many; unwitnessed ones share 10 in the ledger, and
    /// `devices enable` (restoredAt) frees room.
    @Test func unwitnessedAllowance_countsTheLedger_witnessedNeverHeld_restoredFreeRoom() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Self.caregiverWithDevices(conninfo, count: 60)
            let client = PostgresClient(conninfo: conninfo)
            let ids = Self.deviceIds

            #expect(try await Self.disable(client, ids(0..<30), witnessed: true) == ids(0..<30))
            #expect(try await Self.disable(client, ids(30..<42), witnessed: false) == ids(30..<40))
            #expect(try await Self.disable(client, ids(40..<42), witnessed: false) == [])
            #expect(try await Self.disable(client, ids(40..<45), witnessed: true) == ids(40..<45))
            try db.connection.query(#"UPDATE "PushDeviceDisabled" SET "restoredAt" = now() WHERE "pushDeviceId" BETWEEN 'd-30' AND 'd-34'"#)
            #expect(try await Self.disable(client, ids(45..<52), witnessed: false) == ids(45..<50))
            #expect(try Self.count(db, #"SELECT count(*) AS n FROM "PushDevice" WHERE NOT "isEnabled""#) == 50)
        }
    }

    /// The allowance counts the unwitnessed disables made since FCM last accepted a push ("until the first 200"): a
    /// deployment whose first day used its 10, then delivered, may still disable the one phone that got those pushes
    /// once it dies (before, the 10 were for the deployment's life, and that phone's death paused sending for good).
    @Test func unwitnessedAllowance_countsOnlySinceTheLastAcceptedPush() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Self.caregiverWithDevices(conninfo, count: 12)
            let client = PostgresClient(conninfo: conninfo)
            let ids = Self.deviceIds
            #expect(try await Self.disable(client, ids(0..<10), witnessed: false) == ids(0..<10))
            #expect(try await Self.disable(client, ids(10..<11), witnessed: false) == [])
            #expect(await KnownGoodTokens(client: client).newest(excluding: [])?.unwitnessedDisables == 10)
            // FCM accepts a push for d-11.
            try db.connection.query(#"""
                INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", "patientId", status, attempts, "createdAt", "sentAt")
                VALUES ('del-1', 'doseTaken:k', 'd-11', 'p1', \#(literal: DeliveryStatus.sent), 1, clock_timestamp(), clock_timestamp())
                """#)
            let known = await KnownGoodTokens(client: client).newest(excluding: [])
            #expect(known?.unwitnessedDisables == 0)
            #expect(known?.tokens == ["t-11"])
            #expect(try await Self.disable(client, ids(10..<11), witnessed: false) == ids(10..<11))
        }
    }

    /// Three instances disabling unwitnessed at the same moment share one count: the lock orders their statements.
    @Test func unwitnessedAllowance_holdsUnderConcurrentInstances() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Self.caregiverWithDevices(conninfo, count: 60)
            // A role defaulting to REPEATABLE READ must not break the count: the worker's transactions say READ COMMITTED.
            try db.connection.query(#"ALTER DATABASE "\#(unescaped: try db.connection.query("SELECT current_database() AS d")[0]["d"].string())" SET default_transaction_isolation = 'repeatable read'"#)
            try await withThrowingTaskGroup(of: Int.self) { group in
                for instance in 0..<3 {
                    group.addTask {
                        let client = PostgresClient(conninfo: conninfo)
                        var disabled = 0
                        for batch in 0..<4 {
                            let first = instance * 20 + batch * 5
                            disabled += try await Self.disable(client, (first..<first + 5).map { String(format: "d-%02d", $0) }, witnessed: false).count
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
