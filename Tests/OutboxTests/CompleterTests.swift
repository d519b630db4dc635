import Lifecycle
import Logging
import Metrics
@testable import Outbox
import Postgres
import Synchronization
import TestSupport
import Testing

/// The writer's linger: it waits for a larger batch only while nobody waits for the slots its items hold.
@Suite("Completer", .blockingFixtures)
struct CompleterTests {
    /// A completer whose flushes start an hour apart (so its first waits an hour from its start); its store is never reached (the items written are empty ends of lost
    /// groups, which write nothing but still report their receipt).
    static func lingeringCompleter(starved: Bool) -> Completer {
        var configuration = DeliveryEngineConfiguration()
        configuration.completerFlushInterval = .seconds(3600)
        let completer = Completer(store: OutboxStore(client: PostgresClient(conninfo: "host=/nonexistent")), configuration: configuration,
                                  metrics: PipelineMetrics(MetricsRegistry()), logger: Logger(label: "completer", sink: MemorySink()),
                                  stop: StopSignal(), turn: WriteTurn())
        completer.setStarved(starved)
        return completer
    }

    static func lostGroupEnd(_ raw: Int) -> EngineStateMachine.Action {
        .end(EventGroupID(raw: raw), .nothing)
    }

    /// What a writer reported written, in order.
    final class Receipts: Sendable {
        private let items = Recorder<EngineStateMachine.Receipt>()
        func append(_ receipt: EngineStateMachine.Receipt) { items.record(receipt) }
        var all: [EngineStateMachine.Receipt] { items.all }
    }

    /// A lingering completer's writer, started and parked (idle, waiting for its first item); the receipts it reports.
    static func parkedWriter(starved: Bool) async throws -> (Completer, Task<Void, Never>, Receipts) {
        let completer = lingeringCompleter(starved: starved)
        let receipts = Receipts()
        let writer = Task { await completer.run(written: { receipts.append($0) }) }
        try await eventually("the completer parks", timeout: .seconds(60)) { completer.isParked }
        #expect(completer.isParked)
        return (completer, writer, receipts)
    }

    @Test func sendsWaitingForSlots_theWriterWritesAtOnceInsteadOfLingering() async throws {
        let (completer, writer, receipts) = try await Self.parkedWriter(starved: true)
        completer.accept([Self.lostGroupEnd(1)])
        // The first item reached an idle writer, which would linger an hour if nobody waited.
        try await eventually("the writer records a receipt", timeout: .seconds(60)) { !receipts.all.isEmpty }
        #expect(receipts.all == [EngineStateMachine.Receipt(groups: [EventGroupID(raw: 1)])])
        writer.cancel()  // ends a linger a broken build would be in
        completer.close()
        await writer.value
    }

    @Test func noSendWaiting_theWriterLingersForABatch_andClosingWritesWhatIsBuffered() async throws {
        let (completer, writer, receipts) = try await Self.parkedWriter(starved: false)
        completer.accept([Self.lostGroupEnd(1)])
        try await eventually("the completer unparks", timeout: .seconds(60)) { !completer.isParked }
        try await Task.sleep(for: .milliseconds(200))
        completer.accept([Self.lostGroupEnd(2)])
        // Still lingering (an hour): nothing written yet; the stop's close ends the linger early.
        #expect(receipts.all.isEmpty)
        writer.cancel()  // the linger is a cancellable sleep: it ends, and both items go in one write
        completer.close()
        await writer.value
        #expect(receipts.all == [EngineStateMachine.Receipt(groups: [EventGroupID(raw: 1), EventGroupID(raw: 2)])])
    }
}

extension Completer {
    /// The writer is idle, parked until the next item.
    var isParked: Bool { state.withLock { $0.waiter != nil } }
}
