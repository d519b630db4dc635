import FCM
import Foundation
@testable import Outbox
import Synchronization
import Testing

@Suite("Send queue: slots and room for the claimer")
struct SendQueueTests {
    static func sends(_ count: Int) -> [PendingSend] {
        (0..<count).map { index in
            PendingSend(group: EventGroupID(raw: index),
                        delivery: ClaimedDelivery(id: "d\(index)", eventKey: "doseTaken:g\(index)", deviceId: "dev\(index)", token: "t\(index)",
                                                  claimedAt: Date(), lease: LeaseToken()),
                        push: DoseTakenPush(token: "t\(index)", eventKey: "doseTaken:g\(index)", patientId: "p", displayName: "n",
                                            date: "2026-02-11", slot: "morning", recordingGroupId: "g\(index)", withinTime: true))
        }
    }

    @Test func claimerWaitsForABatchOfRoom_notForAnyRoom() async throws {
        let queue = SendQueue(slots: 2, highWater: 8)
        queue.enqueue(Self.sends(8))
        let woken = Mutex(false)
        let waiter = Task {
            await queue.waitForRoom(3)
            woken.withLock { $0 = true }
        }
        // Two sends start and are answered: 2 of the 3 wanted are free.
        for _ in 0..<2 { #expect(queue.take() != nil) }
        #expect(queue.take() == nil)  // both slots busy
        queue.release()
        queue.release()
        try await Task.sleep(for: .milliseconds(50))
        #expect(woken.withLock { $0 } == false)
        #expect(queue.load == 6)
        // The third answered send makes room for the batch.
        #expect(queue.take() != nil)
        queue.release()
        await waiter.value
        #expect(woken.withLock { $0 })
        #expect(queue.load == 5)
    }

    @Test func roomLargerThanTheHighWaterMark_isCappedAtIt() async {
        let queue = SendQueue(slots: 1, highWater: 4)
        await queue.waitForRoom(1_000)  // empty: the whole high-water mark is free, so this returns
        queue.enqueue(Self.sends(1))
        #expect(queue.load == 1)
    }

    @Test func stopWakesAWaitingClaimer() async {
        let queue = SendQueue(slots: 1, highWater: 2)
        queue.enqueue(Self.sends(2))
        let waiter = Task { await queue.waitForRoom(2) }
        try? await Task.sleep(for: .milliseconds(20))
        #expect(queue.stop().count == 2)
        await waiter.value
    }
}
