import FCM
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

@Suite("Delivery engine: isolation, independent sends, leases, stop", .blockingFixtures)
struct EngineTests {
    /// A row whose deliveries cannot be indexed sits among good rows: the good ones are sent, the bad
    /// one goes DEAD with the SQLSTATE and what was wrong; a too-long recordingGroupId is bad input.
    @Test func rowThatCannotBeIndexed_goesDeadAndTheOthersAreSent() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            // A 2.6 KB device id fits the device's own index, but not ("eventKey", "pushDeviceId") with a 200-character group.
            let huge = try db.connection.query("SELECT string_agg(md5(g::text), '') AS s FROM generate_series(1, 81) g")[0]["s"].string()
            try db.patient("p-huge")
            try db.link(caregiver: "c-huge", patient: "p-huge")
            try db.device(owner: "c-huge", token: "token-huge", id: huge)
            var good: [Int64] = []
            for group in 0..<3 { good.append(try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "before-\(group)"))) }
            let unindexable = try db.enqueue(patient: "p-huge", payload: Fixtures.payload(group: String(repeating: "h", count: 200)))
            let tooLong = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: String(repeating: "g", count: 4000)))
            for group in 0..<3 { good.append(try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "after-\(group)"))) }
            let sender = FakeSender()
            try await makeWorker(conninfo, sender: sender).0.drain()

            for id in good { #expect(try db.eventStatus(id).status == .done) }
            #expect(sender.pushes.count == 6)
            let bad = try db.eventStatus(unindexable)
            #expect(bad.status == .dead)
            #expect(bad.lastError?.contains("SQLSTATE 54000") == true)
            #expect(bad.lastError?.contains("index row size") == true)
            let long = try db.eventStatus(tooLong)
            #expect(long.status == .dead)
            #expect(long.lastError?.contains("recordingGroupId is 4000 characters") == true)
        }
    }

    /// The API holds a recipient's device row in a transaction past the worker's lock_timeout (it is changing the
    /// device's token): the fan-out's foreign-key check waits and is cancelled. Nothing is wrong with the event, so that
    /// is a failed attempt, due again after its backoff, never DEAD (before: DEAD at the first lock timeout, "fan-out
    /// refused by the database: SQLSTATE 55P03", and the push lost until an operator's redrive); once the API commits or
    /// rolls back, the push goes out once.
    @Test func recipientRowLockedPastTheLockTimeout_isAFailedAttempt_notADeadEvent() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let api = try PostgresConnection(conninfo: conninfo)
            try api.query("BEGIN")
            try api.query(#"UPDATE "PushDevice" SET token = 'token-a-renewed' WHERE token = 'token-a'"#)
            let sender = FakeSender()
            let sink = MemorySink()
            var configuration = DeliveryEngineConfiguration()
            configuration.pollInterval = .milliseconds(50)
            configuration.backoff = Backoff(base: .milliseconds(100), cap: .seconds(1))
            let client = PostgresClient(conninfo: conninfo, settings: .worker(statementTimeout: .seconds(10), lockTimeout: .milliseconds(200),
                                                                              asynchronousCommit: false))
            let engine = DeliveryEngine(client: client, sender: sender, configuration: configuration,
                                        logger: .init(label: "t", logLevel: .debug, sink: sink), metrics: .init())
            let stop = StopSignal()
            let running = Task { await engine.run(until: stop) }
            // Until the fan-out has met the lock twice, or the event left PENDING (as it went DEAD before).
            let deadline = ContinuousClock.now + .seconds(30)
            var waited = try db.eventStatus(id)
            while ContinuousClock.now < deadline {
                waited = try db.eventStatus(id)
                let met = sink.entries.filter { $0.message.hasPrefix("fan-out not finished by the database") }.count
                if met >= 2 || waited.status != .pending { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(waited.status == .pending)
            #expect(waited.lastError?.hasPrefix("fan-out not finished by the database, tried again: SQLSTATE 55P03") == true,
                    "\(waited.lastError ?? "no lastError")")
            #expect(sender.pushes.isEmpty)

            try api.query("ROLLBACK")
            while ContinuousClock.now < deadline, try db.eventStatus(id).status == .pending {
                try await Task.sleep(for: .milliseconds(20))
            }
            stop.request(grace: .seconds(5))
            await running.value
            let final = try db.eventStatus(id)
            #expect(final.status == .done)
            #expect(final.attempts >= 3, "each lock timeout is an attempt")
            #expect(sender.pushes.map(\.token) == ["token-a"])
        }
    }

    /// Devices FCM answers slowly hold only their own slots: every other push is answered before them.
    @Test func slowDevices_doNotHoldBackOthers() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            try await withEmulatorSender { sender, _ in
                let db = try Fixtures(conninfo)
                try db.patient("p-slow")
                try db.link(caregiver: "c-slow", patient: "p-slow")
                try db.device(owner: "c-slow", token: "slow6000-device")
                try db.patient("p-fast")
                try db.link(caregiver: "c-fast", patient: "p-fast")
                try db.device(owner: "c-fast", token: "fast-device")
                for group in 0..<3 { try db.enqueue(patient: "p-slow", payload: Fixtures.payload(group: "slow-\(group)")) }
                for group in 0..<40 { try db.enqueue(patient: "p-fast", payload: Fixtures.payload(group: "fast-\(group)")) }
                let recording = AnswerOrder(sender)
                let (engine, _, _) = makeWorker(conninfo, sender: recording) {
                    $0.batchSize = 10
                    $0.maxInFlight = 10
                }
                try await engine.drain()
                let order = recording.tokens
                #expect(order.count == 43)
                #expect(Array(order.prefix(40)) == Array(repeating: "fast-device", count: 40))
                #expect(Array(order.suffix(3)) == Array(repeating: "slow6000-device", count: 3))
                #expect(try db.deliveries().allSatisfy { $0.status == .sent })
            }
        }
    }

    /// A stop while sends are in flight: those sends finish and are recorded, nothing queued is started,
    /// what was never sent is released (due at once, attempt uncounted), and a later run sends each push once.
    @Test func stopWithSendsInFlight_recordsThemAndReleasesTheRest() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            for group in 0..<10 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
            let started = AsyncStream<Void>.makeStream()
            let slow = FakeSender(held: true, onStart: { _ in started.continuation.yield() })
            let stop = StopSignal()
            var configuration = DeliveryEngineConfiguration()
            configuration.maxInFlight = 2
            configuration.highWaterFactor = 10
            let engine = DeliveryEngine(client: PostgresClient(conninfo: conninfo), sender: slow, configuration: configuration,
                                        logger: .init(label: "t", sink: MemorySink()), metrics: .init())
            let running = Task { await engine.run(until: stop) }
            var iterator = started.stream.makeAsyncIterator()
            await iterator.next()
            await iterator.next()
            stop.request(grace: .seconds(30))
            slow.open()
            await running.value

            #expect(slow.pushes.count == 2)
            let counts = try db.connection.query(#"""
                SELECT count(*) FILTER (WHERE status = \#(literal: OutboxStatus.done)) AS done,
                       count(*) FILTER (WHERE status = \#(literal: OutboxStatus.pending) AND "availableAt" <= now() AND attempts = 0
                                        AND "leaseToken" IS NULL) AS released
                FROM "PushOutbox"
                """#)[0]
            #expect(try counts["done"].int() == 2)
            #expect(try counts["released"].int() == 8)
            let leased = try db.connection.query(#"SELECT count(*) AS n FROM "PushDelivery" WHERE "leaseToken" IS NOT NULL"#)[0]["n"].int()
            #expect(leased == 0)

            let rest = FakeSender()
            try await makeWorker(conninfo, sender: rest).0.drain()
            let all = slow.pushes + rest.pushes
            #expect(all.count == 10)
            #expect(Set(all.map(\.eventKey)).count == 10)
            #expect(try db.deliveries().allSatisfy { $0.status == .sent })
        }
    }

    /// A send that outlives the stop's deadline is cancelled; FCM may have it, so its delivery keeps its lease
    /// (no re-send before it expires) while its event is given back.
    @Test func sendHungPastTheDeadline_keepsItsDeliveryLease() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let started = AsyncStream<Void>.makeStream()
            let hung = FakeSender(held: true, onStart: { _ in started.continuation.yield() })
            let stop = StopSignal()
            let engine = DeliveryEngine(client: PostgresClient(conninfo: conninfo), sender: hung, configuration: .init(),
                                        logger: .init(label: "t", sink: MemorySink()), metrics: .init())
            let running = Task { await engine.run(until: stop) }
            var iterator = started.stream.makeAsyncIterator()
            await iterator.next()
            stop.request(grace: .milliseconds(100))
            await running.value
            let event = try db.eventStatus(id)
            #expect(event.status == .pending && event.attempts == 0)
            let delivery = try db.connection.query(#"""
                SELECT status, "leaseExpiresAt" > now() AS leased FROM "PushDelivery"
                """#)[0]
            #expect(try delivery["status"].decode(DeliveryStatus.self) == .pending)
            #expect(try delivery["leased"].bool())
        }
    }

    /// Work queued behind MAX_IN_FLIGHT outlives LEASE_SECONDS: the heartbeat keeps the leases, so a second
    /// instance started after the lease would have expired takes nothing over and nothing is sent twice.
    @Test func longQueue_leasesAreExtendedAndNothingIsTakenOver() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            for group in 0..<12 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
            // 12 sends of 1.2 s behind one slot outlast the 12 s lease; a heartbeat every 2 s keeps it. (The dispatcher stops
            // sending 4 s before a lease could lapse by its own clock: on a CI machine running every suite at once, a claim
            // or a beat can take seconds, and a shorter lease made this instance give its work up, correctly.)
            let sender = FakeSender(delay: .milliseconds(1_200))
            let configure: (inout DeliveryEngineConfiguration) -> Void = {
                $0.maxInFlight = 1
                $0.highWaterFactor = 50
                $0.lease = .seconds(12)
            }
            let first = makeWorker(conninfo, sender: sender, configure: configure).0
            async let firstClaimed = first.drain()
            // Once the first instance holds all 12 (14.4 s of sending behind one slot), wait until their first lease
            // would have run out, then start a second instance.
            let leased: PostgresQuery = #"SELECT count(*) AS n, max("leaseExpiresAt") AS expiry FROM "PushOutbox" WHERE "leaseToken" IS NOT NULL"#
            try await eventually("the first worker leases all 12 events", timeout: .seconds(30)) { try db.connection.query(leased)[0]["n"].int() == 12 }
            let firstExpiry = try db.connection.query(leased)[0]["expiry"].date()
            try await eventually("the first worker's leases are 300 ms past their expiry", timeout: .seconds(30)) {
                try db.connection.query("SELECT now() > \(firstExpiry)::timestamptz + interval '300 ms' AS past")[0]["past"].bool()
            }
            let secondClaimed = try await makeWorker(conninfo, sender: sender, configure: configure).0.drain()
            #expect(try await firstClaimed == 12)
            #expect(secondClaimed == 0)
            #expect(sender.pushes.count == 12)
            #expect(Set(sender.pushes.map(\.eventKey)).count == 12)
        }
    }

    /// The heartbeat finds that another instance took events over: their queued deliveries are not sent.
    @Test func lostLease_stopsThatDeliverysSend() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatient(tokens: ["token-a"])
            for group in 0..<4 { try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g\(group)")) }
            let started = AsyncStream<String>.makeStream()
            let gated = FakeSender(held: true, onStart: { push in started.continuation.yield(push.eventKey) })
            let (engine, _, sink) = makeWorker(conninfo, sender: gated) {
                $0.maxInFlight = 1
                $0.highWaterFactor = 10
                $0.lease = .seconds(6)  // heartbeat every second, send margin 2 s: a loaded CI machine keeps the in-flight one's lease
            }
            async let drained = engine.drain()
            var iterator = started.stream.makeAsyncIterator()
            let sending = try #require(await iterator.next())
            let group = String(sending.dropFirst("doseTaken:".count))
            // Another instance takes over every event but the one being sent.
            try db.connection.query(#"""
                UPDATE "PushOutbox" SET "leasedBy" = 'another-instance', "leaseToken" = gen_random_uuid(), "leaseExpiresAt" = now() + interval '1 hour',
                    "availableAt" = now() + interval '1 hour' WHERE payload->>'recordingGroupId' <> \#(group)
                """#)
            try db.connection.query(#"""
                UPDATE "PushDelivery" SET "leaseToken" = gen_random_uuid(), "leaseExpiresAt" = now() + interval '1 hour'
                WHERE "eventKey" <> \#(sending)
                """#)
            // Until the heartbeat has found the takeover.
            try await eventually("the engine logs \"lease lost\"", timeout: .seconds(30)) { sink.entries.contains { $0.message.hasPrefix("lease lost") } }
            gated.open()
            _ = try await drained
            #expect(gated.pushes.map(\.eventKey) == [sending], "\(sink.entries.map { "\($0.message) \($0.metadata)" })")
            let kept = Int64(try db.connection.query(#"SELECT id FROM "PushOutbox" WHERE payload->>'recordingGroupId' = \#(group)"#)[0]["id"].int())
            #expect(try db.eventStatus(kept).status == .done)
        }
    }
}

/// Records the order in which pushes were answered.
final class AnswerOrder: PushSender, Sendable {
    let inner: any PushSender
    private let order = Recorder<String>()

    init(_ inner: any PushSender) { self.inner = inner }

    var tokens: [String] { order.all }

    func start(_ push: DoseTakenPush, completion: @escaping @Sendable (SendOutcome) -> Void) {
        inner.start(push) { [self] outcome in
            order.record(push.token)
            completion(outcome)
        }
    }

    func cancelWaiting() { inner.cancelWaiting() }
    func cancelInFlight() { inner.cancelInFlight() }
}
