import Lifecycle
import Logging
import Metrics
@testable import Outbox
import Postgres
import Synchronization
import Testing

/// The writer's linger: it waits for a larger batch only while nobody waits for the slots its items hold.
@Suite("Completer")
struct CompleterTests {
    /// A completer whose linger is an hour; its store is never reached (the items written are empty ends of lost
    /// groups, which write nothing but still report their receipt).
    static func lingeringCompleter(starved: Bool) -> Completer {
        var configuration = DeliveryEngineConfiguration()
        configuration.completerFlushDelay = .seconds(3600)
        return Completer(store: OutboxStore(client: PostgresClient(conninfo: "host=/nonexistent")), configuration: configuration,
                         metrics: PipelineMetrics(MetricsRegistry()), logger: Logger(label: "completer", sink: MemorySink()),
                         stop: StopSignal(), turn: WriteTurn(), isStarved: { starved }, onSettled: {})
    }

    /// Waits (at most a minute: only a broken build waits that long) until `condition` holds.
    static func eventually(_ condition: () -> Bool) async throws {
        var waited = 0
        while !condition() && waited < 6_000 {
            try await Task.sleep(for: .milliseconds(10))
            waited += 1
        }
    }

    static func lostGroupEnd(_ raw: Int) -> EngineStateMachine.Action {
        var group = EngineStateMachine.Group(events: [], eventKey: "doseTaken:\(raw)", deliveries: [:], open: 0)
        group.lost = true
        return .settle(EventGroupID(raw: raw), group)
    }

    @Test func sendsWaitingForSlots_theWriterWritesAtOnceInsteadOfLingering() async throws {
        let completer = Self.lingeringCompleter(starved: true)
        let receipts = Mutex<[EngineStateMachine.Receipt]>([])
        let writer = Task { await completer.run(written: { receipt in receipts.withLock { $0.append(receipt) } }) }
        try await Self.eventually { completer.isParked }
        #expect(completer.isParked)
        completer.accept([Self.lostGroupEnd(1)])
        // The first item reached an idle writer, which would linger an hour if nobody waited.
        try await Self.eventually { !receipts.withLock { $0.isEmpty } }
        #expect(receipts.withLock { $0 } == [EngineStateMachine.Receipt(groups: [EventGroupID(raw: 1)])])
        writer.cancel()  // ends a linger a broken build would be in
        completer.close()
        await writer.value
    }

    @Test func noSendWaiting_theWriterLingersForABatch_andClosingWritesWhatIsBuffered() async throws {
        let completer = Self.lingeringCompleter(starved: false)
        let receipts = Mutex<[EngineStateMachine.Receipt]>([])
        let writer = Task { await completer.run(written: { receipt in receipts.withLock { $0.append(receipt) } }) }
        try await Self.eventually { completer.isParked }
        #expect(completer.isParked)
        completer.accept([Self.lostGroupEnd(1)])
        try await Self.eventually { !completer.isParked }
        try await Task.sleep(for: .milliseconds(200))
        completer.accept([Self.lostGroupEnd(2)])
        // Still lingering (an hour): nothing written yet; the stop's close ends the linger early.
        #expect(receipts.withLock { $0.isEmpty })
        writer.cancel()  // the linger is a cancellable sleep: it ends, and both items go in one write
        completer.close()
        await writer.value
        #expect(receipts.withLock { $0 } == [EngineStateMachine.Receipt(groups: [EventGroupID(raw: 1), EventGroupID(raw: 2)])])
    }
}
