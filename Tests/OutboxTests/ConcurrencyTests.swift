import FCM
import Foundation
@testable import Outbox
import Postgres
import Push
import Testing
import TestSupport

@Suite("Delivery pipeline: crashes, leases, several workers", .blockingFixtures)
struct ConcurrencyTests {
    /// A worker inserted deliveries, leased the event, then died. Once the lease expires the next
    /// worker sends exactly those deliveries.
    @Test func crashWindow_pendingDeliveriesOfADeadWorkerAreSentAfterLeaseExpiry() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            let d1 = try db.device(owner: "c1", token: "token-a")
            let d2 = try db.device(owner: "c1", token: "token-b")
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "g-crash"))
            // What the dead worker left behind: its claim (lease not yet expired) and leased PENDING deliveries.
            try db.connection.query(#"""
                UPDATE "PushOutbox" SET attempts = 1, "leasedBy" = 'dead:1', "leaseToken" = gen_random_uuid(),
                    "leaseExpiresAt" = now() + interval '1 hour', "availableAt" = now() + interval '1 hour' WHERE id = \#(id)
                """#)
            for device in [d1, d2] {
                try db.connection.query(#"""
                    INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, attempts, "leaseToken", "leaseExpiresAt")
                    VALUES (gen_random_uuid()::text, 'doseTaken:g-crash', \#(device), \#(literal: DeliveryStatus.pending), 1, gen_random_uuid(), now() + interval '1 hour')
                    """#)
            }
            let sender = FakeSender()
            let (worker, _, _) = makeWorker(conninfo, sender: sender)
            #expect(try await worker.drain() == 0)  // still leased: nothing to do
            try db.connection.query(#"UPDATE "PushOutbox" SET "leaseExpiresAt" = now() - interval '1 s', "availableAt" = now() - interval '1 s'"#)
            try db.connection.query(#"UPDATE "PushDelivery" SET "leaseExpiresAt" = now() - interval '1 s'"#)
            #expect(try await worker.drain() == 1)
            #expect(sender.pushes.map(\.token).sorted() == ["token-a", "token-b"])
            #expect(try db.deliveries().map(\.status) == [.sent, .sent])
            let event = try db.eventStatus(id)
            #expect(event.status == .done && event.attempts == 2)
        }
    }

    /// Worker A's lease expired and worker B took the event over; A's late completion changes nothing.
    @Test func lostLease_cannotOverwriteTheNewOwnersResult() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let store = OutboxStore(client: PostgresClient(conninfo: conninfo))
            let claimedA = try await store.claim(limit: 10, workerId: "a", lease: .seconds(60))
            #expect(claimedA.map(\.id) == [id])
            try db.connection.query(#"UPDATE "PushOutbox" SET "availableAt" = now() - interval '1 s', "leaseExpiresAt" = now() - interval '1 s'"#)
            let claimedB = try await store.claim(limit: 10, workerId: "b", lease: .seconds(60))
            #expect(claimedB.map(\.id) == [id])
            _ = try await store.complete(.init(finished: [FinishedEvent(id: id, lease: claimedB[0].lease, status: .dead, reason: "from B")]),
                                         maxAttempts: 10)
            let late = try await store.complete(.init(settlements: [
                EventSettlement(id: id, eventKey: "doseTaken:group-1", patientId: "p1", lease: claimedA[0].lease, retryDelay: .seconds(1), error: "from A"),
            ]), maxAttempts: 10)
            #expect(late.eventStatuses.isEmpty)
            let row = try db.eventStatus(id)
            #expect(row.status == .dead && row.lastError == "from B")
        }
    }

    /// A failover lost the fan-out that inserted an event's deliveries but kept its claim: the results written on the
    /// new primary find no rows, and the event is not settled DONE on that absence (it is due again, and a new fan-out
    /// sends what the database no longer knows was sent).
    /// One patient with two devices, one event claimed and fanned out (`group-1`): what a failover case starts from.
    static func claimedAndFannedOut(_ conninfo: String) async throws
        -> (db: Fixtures, store: OutboxStore, id: Int64, lease: LeaseToken, deliveries: [ClaimedDelivery]) {
        let db = try Fixtures(conninfo)
        try db.patient("p1")
        try db.link(caregiver: "c1", patient: "p1")
        _ = try db.device(owner: "c1", token: "token-a")
        _ = try db.device(owner: "c1", token: "token-b")
        let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
        let store = OutboxStore(client: PostgresClient(conninfo: conninfo))
        let lease = try await store.claim(limit: 10, workerId: "a", lease: .seconds(60))[0].lease
        let deliveries = try await DeliveryFanOut(client: store.client, settings: store.settings)
            .deliveries(for: [.init(id: id, eventKey: "doseTaken:group-1", patientId: "p1")], token: lease, lease: .seconds(60)).deliveries
        return (db, store, id, lease, deliveries)
    }

    @Test func resultsWithoutTheirRows_leaveTheEventPending() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let (db, store, id, lease, deliveries) = try await Self.claimedAndFannedOut(conninfo)
            #expect(deliveries.count == 2)
            try db.connection.query(#"DELETE FROM "PushDelivery""#)  // the fan-out's commit, lost with the old primary
            let summary = try await store.complete(.init(
                deliveries: deliveries.map { Self.sent($0, "projects/p/messages/1") },
                settlements: [EventSettlement(id: id, eventKey: "doseTaken:group-1", patientId: "p1", lease: lease, retryDelay: .seconds(1), error: nil)]),
                maxAttempts: 10)
            #expect(summary.eventStatuses[id] == .pending)
            #expect(try db.eventStatus(id).status == .pending)
        }
    }

    /// `"sentAt"` is when the worker had FCM's answer, not when the row was written: a writer held up (a linger, a busy
    /// database) does not move it. The event's `"processedAt"` is still the write's own time.
    @Test func sentAt_isWhenFCMAnswered_notWhenTheRowWasWritten() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let (db, store, id, lease, deliveries) = try await Self.claimedAndFannedOut(conninfo)
            #expect(deliveries.count == 2)
            let answered = [Date(timeIntervalSinceNow: -90), Date(timeIntervalSinceNow: -30)]
            let summary = try await store.complete(.init(
                deliveries: zip(deliveries, answered).map { Self.sent($0, "m", answeredAt: $1) },
                settlements: [EventSettlement(id: id, eventKey: "doseTaken:group-1", patientId: "p1", lease: lease, retryDelay: .seconds(1), error: nil,
                                              deliveryIds: deliveries.map(\.id))]),
                maxAttempts: 10)
            #expect(summary.eventStatuses[id] == .done)
            for (delivery, at) in zip(deliveries, answered) {
                let row = try db.connection.query(#"""
                    SELECT extract(epoch FROM d."sentAt")::float8 AS sent, extract(epoch FROM o."processedAt")::float8 AS processed
                    FROM "PushDelivery" d JOIN "PushOutbox" o ON o."eventKey" = d."eventKey" WHERE d.id = \#(delivery.id)
                    """#)[0]
                let sent = try row["sent"].double(), processed = try row["processed"].double()
                #expect(abs(sent - at.timeIntervalSince1970) < 0.001, "sentAt \(sent), answered \(at.timeIntervalSince1970)")
                #expect(processed - sent > 29, "processedAt \(processed) is the write's time, after the answer")
            }
        }
    }

    /// A failover lost the fan-out and the flush that recorded its results, and kept the claim; the event's settlement
    /// comes alone, in a later flush on the new primary, and finds no row of its key at all. It is not DONE on that
    /// absence: the deliveries its attempt fanned out are not in the table, so it is due again (the fault suite's
    /// `failover` case lost 10 pushes this way in 1 run of 12).
    @Test func settlementWhoseDeliveriesAreGone_leavesTheEventPending() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let (db, store, id, lease, deliveries) = try await Self.claimedAndFannedOut(conninfo)
            #expect(deliveries.count == 2)
            _ = try await store.complete(.init(deliveries: deliveries.map { Self.sent($0, "m") }),
                                         maxAttempts: 10)
            try db.connection.query(#"DELETE FROM "PushDelivery""#)  // the fan-out and the results, lost with the old primary
            let settlement = EventSettlement(id: id, eventKey: "doseTaken:group-1", patientId: "p1", lease: lease, retryDelay: .seconds(1), error: nil,
                                             deliveryIds: deliveries.map(\.id))
            let summary = try await store.complete(.init(settlements: [settlement]), maxAttempts: 10)
            #expect(summary.eventStatuses[id] == .pending)
            #expect(try db.eventStatus(id).status == .pending)
            // With its rows in place (written in an earlier flush), the same settlement is DONE.
            let other = try db.enqueue(patient: "p1", payload: Fixtures.payload(group: "group-2"))
            let second = try await store.claim(limit: 10, workerId: "a", lease: .seconds(60)).first { $0.id == other }!
            let sent = try await DeliveryFanOut(client: store.client, settings: store.settings)
                .deliveries(for: [.init(id: other, eventKey: "doseTaken:group-2", patientId: "p1")], token: second.lease, lease: .seconds(60)).deliveries
            _ = try await store.complete(.init(deliveries: sent.map { Self.sent($0, "m") }),
                                         maxAttempts: 10)
            let done = try await store.complete(.init(settlements: [EventSettlement(
                id: other, eventKey: "doseTaken:group-2", patientId: "p1", lease: second.lease, retryDelay: .seconds(1), error: nil, deliveryIds: sent.map(\.id))]),
                maxAttempts: 10)
            #expect(done.eventStatuses[other] == .done)
        }
    }

    /// A retried event's earlier deliveries are probed even when every current target is new: a device disabled and
    /// replaced since the first attempt has its PENDING delivery failed, so the event can finish.
    @Test func retriedEvent_withEveryDeviceReplaced_failsTheOldDelivery() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.patient("p1")
            try db.link(caregiver: "c1", patient: "p1")
            let old = try db.device(owner: "c1", token: "token-old")
            let id = try db.enqueue(patient: "p1", payload: Fixtures.payload())
            let store = OutboxStore(client: PostgresClient(conninfo: conninfo))
            let fanOut = DeliveryFanOut(client: store.client, settings: store.settings)
            let first = try await store.claim(limit: 10, workerId: "a", lease: .seconds(60))
            _ = try await fanOut.deliveries(for: [.init(id: id, eventKey: "doseTaken:group-1", patientId: "p1", attempts: first[0].attempts)],
                                            token: first[0].lease, lease: .seconds(60))
            // The first attempt ends unwritten (a crash); the device is replaced before the retry.
            try db.connection.query(#"UPDATE "PushOutbox" SET "availableAt" = now() - interval '1 s', "leaseExpiresAt" = now() - interval '1 s'"#)
            try db.connection.query(#"UPDATE "PushDelivery" SET "leaseExpiresAt" = now() - interval '1 s'"#)
            try db.connection.query(#"UPDATE "PushDevice" SET "isEnabled" = false WHERE id = \#(old)"#)
            _ = try db.device(owner: "c1", token: "token-new")
            let second = try await store.claim(limit: 10, workerId: "a", lease: .seconds(60))
            #expect(second.map(\.attempts) == [2])
            let deliveries = try await fanOut.deliveries(for: [.init(id: id, eventKey: "doseTaken:group-1", patientId: "p1", attempts: second[0].attempts)],
                                                         token: second[0].lease, lease: .seconds(60)).deliveries
            #expect(deliveries.map(\.token) == ["token-new"])
            let rows = try db.connection.query(#"SELECT "pushDeviceId", status, "lastError" FROM "PushDelivery""#)
            let oldRow = try rows.first { try $0["pushDeviceId"].string() == old }
            #expect(try oldRow?["status"].decode(DeliveryStatus.self) == .failed)
            // The reason `EventFate.notSent` gives a disabled device, as the fan-out statement wrote it.
            #expect(oldRow?["lastError"].optionalString() == EventFate.notSent(.deviceDisabled))
        }
    }

    /// Two workers drain 1,000 events × 2 devices side by side: every (event, device) is sent exactly once.
    @Test func twoWorkersInParallel_everyDeliverySentExactlyOnce() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = try Fixtures(conninfo)
            try db.caredForPatients(100, devicesEach: 2, events: 1000)
            let sender = FakeSender()
            let a = makeWorker(conninfo, sender: sender) { $0.batchSize = 50 }.0
            let b = makeWorker(conninfo, sender: sender) { $0.batchSize = 50 }.0
            async let claimedA = a.drain()
            async let claimedB = b.drain()
            let (countA, countB) = try await (claimedA, claimedB)
            #expect(countA + countB == 1000)
            #expect(countA > 0 && countB > 0)
            let pushes = sender.pushes
            #expect(pushes.count == 2000)
            #expect(Set(pushes.map { "\($0.eventKey)|\($0.token)" }).count == 2000)
            let summary = try db.connection.query(#"""
                SELECT (SELECT count(*) FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.sent)) AS sent,
                       (SELECT count(*) FROM "PushOutbox" WHERE status = \#(literal: OutboxStatus.done)) AS done
                """#)[0]
            #expect(try summary["sent"].int() == 2000)
            #expect(try summary["done"].int() == 1000)
        }
    }
}

extension ConcurrencyTests {
    /// A delivery written SENT, as the engine's `.record` action would hand it to the writer.
    static func sent(_ delivery: ClaimedDelivery, _ name: String, answeredAt: Date = Date()) -> (send: PendingSend, write: DeliveryWrite) {
        let push = DoseTakenPush(token: delivery.token, eventKey: delivery.eventKey, patientId: delivery.patientId, displayName: "n",
                                 date: "2026-02-11", slot: "morning", recordingGroupId: nil, withinTime: true)
        return (PendingSend(group: EventGroupID(raw: 0), outboxIds: [], delivery: delivery, push: push), .sent(messageName: name, answeredAt: answeredAt))
    }
}
