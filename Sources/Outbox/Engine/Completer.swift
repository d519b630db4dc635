import FoundationEssentials
import Lifecycle
import Logging
import Postgres
import Push
import Synchronization
import Timekeeping

/// Whoever frees the places a write's deliveries held: the engine loop (tests: a recorder).
/// Writes what the engine's actions say, in bounded batches, deciding nothing itself: delivery outcomes as FCM answers
/// them, and each group's end (its events settled, released, or nothing) the moment its last delivery is answered.
/// Flushes start at most every `completerFlushInterval` (10 ms), unless a batch's worth is already there or sends are
/// waiting for the places its items hold; items arriving meanwhile go into the next one. A flush carries at most
/// `completerFlushCount` items, and every answered delivery holds its place in `MAX_IN_FLIGHT` until its flush is
/// over, so the buffer never outgrows `MAX_IN_FLIGHT` outcomes plus the settlements and releases that go with them.
final class Completer: Sendable {
    /// One buffered write and what it confirms to the engine's books once written.
    enum Entry: Sendable {
        /// One answered delivery and what its row gets, as the machine's `.record` action said (the common case, kept
        /// free of arrays of its own).
        case record(PendingSend, DeliveryWrite)
        /// A completion of its own: a group's end, a delivery's release, events finished without sending.
        case completion(OutboxStore.Completion, EngineStateMachine.Receipt)

        /// Items it adds to a flush.
        var count: Int {
            switch self {
            case .record: 1
            case .completion(let completion, _): completion.count
            }
        }
    }

    struct State {
        var entries: [Entry] = []
        var buffered = 0
        var waiter: CheckedContinuation<Void, Never>?
        var closed = false

        /// Takes entries in order up to `limit` items (at least one entry).
        mutating func take(upTo limit: Int) -> [Entry] {
            var count = 0
            var taken = 0
            while taken < entries.count, taken == 0 || count + entries[taken].count <= limit {
                count += entries[taken].count
                taken += 1
            }
            buffered -= count
            let batch = Array(entries.prefix(taken))
            entries.removeFirst(taken)
            return batch
        }

        mutating func takeWaiter() -> CheckedContinuation<Void, Never>? {
            defer { waiter = nil }
            return waiter
        }
    }

    private let store: OutboxStore
    private let configuration: DeliveryEngineConfiguration
    private let metrics: PipelineMetrics
    private let logger: Logger
    private let stop: StopSignal
    /// The claimers' wake-up, rung when a write finished or rescheduled events (their retries or the next events may be due).
    private let claimerWake: WakeSignal
    /// Shared with the heartbeat: one of them writes at a time.
    private let turn: WriteTurn
    /// The buffered items, and the writer's continuation while it is parked waiting for the next one.
    let state = Mutex(State())
    /// A batch this large is written without lingering: half the send slots, so that sends go on while it is written.
    private let eagerCount: Int
    /// Sends are queued behind full slots (the engine loop's `isStarved`, published after every transition): then the
    /// writer never lingers.
    private let starved = Atomic<Bool>(false)

    init(store: OutboxStore, configuration: DeliveryEngineConfiguration, metrics: PipelineMetrics, logger: Logger,
         stop: StopSignal, turn: WriteTurn, claimerWake: WakeSignal = WakeSignal()) {
        self.store = store
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.stop = stop
        self.turn = turn
        self.claimerWake = claimerWake
        eagerCount = Self.eagerCount(for: configuration)
    }

    /// Outcomes that make an idle writer flush at once: half the sends on the wire (at most a full flush).
    static func eagerCount(for configuration: DeliveryEngineConfiguration) -> Int {
        max(1, min(configuration.completerFlushCount, configuration.sendingSlots / 2))
    }

    // MARK: Producers

    /// Whether sends wait for the slots the buffered outcomes hold (the engine loop says so after every transition).
    func setStarved(_ value: Bool) { starved.store(value, ordering: .relaxed) }

    /// Buffers the writes among a transition's actions, in their order (the engine loop hands them over in the order
    /// its machine returned them, so a group's end is always buffered after the outcomes of its deliveries), and
    /// counts and logs each answered delivery as it comes: the one place an answer reaches the writer.
    func accept(_ actions: [EngineStateMachine.Action], starved: Bool? = nil) {
        if let starved { setStarved(starved) }
        var entries: [Entry] = []
        for action in actions {
            switch action {
            case .send:
                continue
            case .record(let send, let write):
                report(send, write)
                entries.append(.record(send, write))
            case .release(let send):
                entries.append(.completion(OutboxStore.Completion(releasedDeliveries: [(send.delivery.id, send.delivery.lease)]), .init()))
            case .end(let id, .settle(let settlements)):
                entries.append(.completion(OutboxStore.Completion(settlements: settlements), .init(groups: [id])))
            case .end(let id, .release(let events)):
                entries.append(.completion(OutboxStore.Completion(releasedEvents: events), .init(groups: [id])))
            case .end(let id, .nothing):
                entries.append(.completion(OutboxStore.Completion(), .init(groups: [id])))
            }
        }
        add(entries)
    }

    /// Events decided without sending (bad input → DEAD, too old → EXPIRED).
    func finish(_ events: [FinishedEvent]) {
        guard !events.isEmpty else { return }
        add([.completion(OutboxStore.Completion(finished: events), .init())])
    }

    /// No more items will come: `run` writes what is buffered and returns.
    func close() {
        let waiter = state.withLock { state in
            state.closed = true
            return state.takeWaiter()
        }
        waiter?.resume()
    }

    /// Logs and counts an answered delivery by what its row gets.
    private func report(_ send: PendingSend, _ write: DeliveryWrite) {
        switch write {
        case .sent(_, let answeredAt):
            metrics.delivered(.sent)
            if let createdAt = send.createdAt { metrics.waited(seconds: answeredAt.timeIntervalSince(createdAt)) }
        case .disable(let answer, _, _):
            metrics.delivered(.tokenInvalid)
            logger.info("device token is no longer valid", metadata: metadata(send, answer.reason))
        case .failed(let reason):
            metrics.delivered(.failed)
            logger.error("push failed permanently; operator action needed", metadata: metadata(send, reason))
        case .pending(let reason, _):
            metrics.delivered(.retry)
            logger.debug("push will be retried", metadata: metadata(send, reason))
        }
    }

    private func add(_ entries: [Entry]) {
        guard !entries.isEmpty else { return }
        let waiter = state.withLock { state in
            for entry in entries { state.buffered += entry.count }
            state.entries += entries
            return state.takeWaiter()
        }
        waiter?.resume()
    }

    private func metadata(_ send: PendingSend, _ reason: String) -> LogMetadata {
        ["outbox.id": send.outboxId, "device.id": send.delivery.deviceId,
         "device.token": Redact.token(send.delivery.token), "fcm.error": reason]
    }

    // MARK: The writer

    /// Flushes until closed and empty, reporting each flush's receipt to `written` (done, refused item by item,
    /// or given up at the stop deadline), which frees the slots its deliveries held. A flush waits until
    /// `completerFlushInterval` after the previous one began (or the writer started) while less than a batch is there
    /// and no send waits for a slot: at FCM's 50 ms, answers come spread out, and flushing each handful as it came cost
    /// PostgreSQL 8% more per push (a transaction each: BEGIN, the settings, the statement, COMMIT) and the worker 6%.
    func run(written: @Sendable (EngineStateMachine.Receipt) async -> Void) async {
        var lastFlush = ContinuousClock.now
        while true {
            guard await waitForItems() else { return }
            let eager = state.withLock { $0.buffered >= eagerCount || $0.closed }
            // Lingering gathers a larger batch only while it costs nobody: when sends are waiting for the slots
            // these outcomes hold, every moment of it is a moment of sending lost, so the write starts at once.
            let due = lastFlush + configuration.completerFlushInterval
            if !eager && !starved.load(ordering: .relaxed) && ContinuousClock.now < due { try? await Task.sleep(until: due) }
            lastFlush = ContinuousClock.now
            let entries = state.withLock { $0.take(upTo: configuration.completerFlushCount) }
            var batch = OutboxStore.Completion()
            var receipt = EngineStateMachine.Receipt()
            batch.deliveries.reserveCapacity(entries.count)
            receipt.deliveries.reserveCapacity(entries.count)
            for entry in entries {
                switch entry {
                case .record(let send, let write):
                    batch.deliveries.append((send, write))
                    receipt.deliveries.append(.init(group: send.group, delivery: send.delivery.id))
                case .completion(let completion, let written):
                    batch.append(completion)
                    receipt.append(written)
                }
            }
            let started = ContinuousClock.now
            await turn.take()
            await write(batch)
            turn.pass()
            metrics.flushed(seconds: (ContinuousClock.now - started).asSeconds)
            await written(receipt)
        }
    }

    /// Waits until something is buffered: false when closed with nothing left.
    private func waitForItems() async -> Bool {
        while true {
            let ready = state.withLock { state -> Bool? in
                if !state.entries.isEmpty { return true }
                return state.closed ? false : nil
            }
            if let ready { return ready }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Park until `add` or `close`; re-checked under the lock so no wake-up is lost.
                let waiting = state.withLock { state -> Bool in
                    guard state.entries.isEmpty, !state.closed else { return false }
                    state.waiter = continuation
                    return true
                }
                if !waiting { continuation.resume() }
            }
        }
    }

    /// Waits after consecutive failed writes: 250 ms, 500 ms, … 5 s.
    static let retryBackoff = Backoff(base: .milliseconds(250), cap: .seconds(5))

    /// One transaction for the batch. A database outage is ridden out for as long as the engine runs (answered
    /// work keeps its slots and leases meanwhile, so nothing new is sent and nothing is re-sent); it is given up
    /// only once the stop deadline has passed, when the leases expire and the work is retried. Called holding the
    /// write turn, which it passes to the heartbeat while it waits to try again. A deadlock with
    /// another writer, a lock wait or a statement timeout (`PostgresError.isTransient`) is retried whole; a statement
    /// the server refuses is retried item by item so one bad row cannot hold the others back.
    private func write(_ batch: OutboxStore.Completion) async {
        guard !batch.isEmpty else { return }
        var attempt = 0
        while true {
            do {
                let summary = try await store.complete(batch, maxAttempts: configuration.maxAttempts)
                if attempt > 0 { logger.notice("delivery results recorded again", metadata: ["outbox.items": "\(batch.count)"]) }
                afterWrite(summary, of: batch)
                return
            } catch let error as PostgresError where error.isConnectionError || error.isTransient {
                attempt += 1
                if attempt == 1 { logger.warning("cannot record delivery results; retrying", metadata: ["error": "\(error)"]) }
                if stop.deadlinePassed {
                    logger.error("gave up recording delivery results: leases expire and the work is retried",
                                 metadata: ["error": "\(error)", "outbox.items": "\(batch.count)"])
                    return
                }
                // The heartbeat's turn meanwhile: the leases of this batch's work (and the rest held) stay renewed while
                // the database refuses only this write, so no other instance claims what was answered and sends it again.
                turn.pass()
                try? await Task.sleep(for: Self.retryBackoff.delay(afterAttempt: attempt))
                await turn.take()
            } catch {
                guard batch.count > 1 else {
                    logger.error("a result was refused by the database", metadata: ["error": "\(error)"])
                    if let settlement = batch.settlements.first {
                        let refusal = error as? PostgresError
                        await write(OutboxStore.Completion(finished: [EventFate.settlementRefused(settlement, sqlState: refusal?.sqlState,
                                                                                                  message: refusal?.message)]))
                    }
                    return
                }
                logger.notice("a batch of results was refused; writing them one at a time",
                              metadata: ["error": "\(error)", "outbox.items": "\(batch.count)"])
                for single in batch.singles { await write(single) }
                return
            }
        }
    }

    private func afterWrite(_ summary: OutboxStore.CompletionSummary, of batch: OutboxStore.Completion) {
        var reasons: [String: String] = [:]
        if !summary.disabledDevices.isEmpty {
            for case (let send, .disable(let answer, _, _)) in batch.deliveries { reasons[send.delivery.deviceId] = answer.reason }
        }
        for device in summary.disabledDevices {
            let reason = reasons[device] ?? "unknown"
            metrics.tokenDisabled(reason)
            logger.notice("device disabled", metadata: ["device.id": device, "fcm.error": reason])
        }
        for (id, status) in summary.eventStatuses {
            metrics.eventFinished(status)
            if status == .dead { logger.warning("outbox event is DEAD", metadata: ["outbox.id": "\(id)"]) }
        }
        if !summary.eventStatuses.isEmpty { claimerWake.wake() }
    }
}
