import FCM
import Foundation
import Logging
import Postgres
import Synchronization

/// Writes what the pipeline learned, in batches: delivery results as FCM answers them, and each
/// event's settlement (DONE / due again / DEAD) the moment its last delivery is answered. An idle
/// writer flushes `completerFlushDelay` after the first item, or at once at `completerFlushCount`
/// items; items arriving during a write go into the next one, written as soon as that one ends.
final class Completer: Sendable {
    private struct State {
        var buffer = OutboxStore.Completion()
        /// Reasons of dead tokens in the buffer, for the disabled-device metric.
        var disableReasons: [String: String] = [:]
        var waiter: CheckedContinuation<Void, Never>?
        var closed = false
    }

    private let store: OutboxStore
    private let ledger: EventLedger
    private let configuration: DeliveryEngineConfiguration
    private let metrics: PipelineMetrics
    private let logger: Logger
    private let onSettled: @Sendable () -> Void
    private let state = Mutex(State())

    init(store: OutboxStore, ledger: EventLedger, configuration: DeliveryEngineConfiguration, metrics: PipelineMetrics,
         logger: Logger, onSettled: @escaping @Sendable () -> Void) {
        self.store = store
        self.ledger = ledger
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.onSettled = onSettled
    }

    // MARK: Producers

    /// A send was answered: record the delivery, and settle its event if it was the last one.
    func record(_ send: PendingSend, _ outcome: SendOutcome) {
        if case .notSent = outcome {
            skipped(send)
            return
        }
        report(send, outcome)
        var completion = OutboxStore.Completion(deliveries: [DeliveryResult(delivery: send.delivery, outcome: outcome)])
        if let group = ledger.close(send.group, delivery: send.delivery.id, .answered(outcome)) {
            completion.append(settlement(of: group))
        }
        var reason: String?
        if case .tokenInvalid(let why) = outcome { reason = why }
        add(completion, disabling: reason.map { (send.delivery.deviceId, $0) })
    }

    /// A queued send was never started (stop, lost lease): its lease is given back.
    func skipped(_ send: PendingSend) {
        var completion = OutboxStore.Completion(releasedDeliveries: [(send.delivery.id, send.delivery.lease)])
        if let group = ledger.close(send.group, delivery: send.delivery.id, .notSent) { completion.append(settlement(of: group)) }
        add(completion)
    }

    /// A send cancelled at the stop deadline: nothing is written for the delivery (its lease stays).
    func abandoned(_ send: PendingSend) {
        if let group = ledger.close(send.group, delivery: send.delivery.id, .abandoned) { add(settlement(of: group)) }
    }

    /// Events decided without sending (bad input → DEAD, too old → EXPIRED).
    func finish(_ events: [FinishedEvent]) {
        guard !events.isEmpty else { return }
        add(OutboxStore.Completion(finished: events))
    }

    /// Settles a group taken from the ledger (no deliveries, or the stop deadline passed).
    func settle(_ group: EventLedger.Group) { add(settlement(of: group)) }

    /// No more items will come: `run` writes what is buffered and returns.
    func close() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.closed = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    private func settlement(of group: EventLedger.Group) -> OutboxStore.Completion {
        if group.lost {
            // Another instance owns these events now: writing anything would be refused by the lease guard anyway.
            return OutboxStore.Completion()
        }
        if group.unsent || group.abandoned {
            return OutboxStore.Completion(releasedEvents: group.events.map { ($0.id, $0.lease) })
        }
        let settlements = group.events.map { event in
            EventSettlement(id: event.id, eventKey: group.eventKey, lease: event.lease,
                            retryDelay: max(configuration.backoff.delay(afterAttempt: event.attempts), group.retryFloor),
                            error: group.retryReason)
        }
        return OutboxStore.Completion(settlements: settlements)
    }

    private func add(_ completion: OutboxStore.Completion, disabling: (device: String, reason: String)? = nil) {
        guard !completion.isEmpty else { return }
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.buffer.append(completion)
            if let disabling { state.disableReasons[disabling.device] = disabling.reason }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    private func report(_ send: PendingSend, _ outcome: SendOutcome) {
        switch outcome {
        case .sent:
            metrics.delivered(.sent)
        case .tokenInvalid(let reason):
            metrics.delivered(.tokenInvalid)
            logger.info("device token is no longer valid", metadata: metadata(send, reason))
        case .permanentFailure(let reason):
            metrics.delivered(.failed)
            logger.error("push failed permanently; operator action needed", metadata: metadata(send, reason))
        case .retry(let reason, _, _):
            metrics.delivered(.retry)
            logger.debug("push will be retried", metadata: metadata(send, reason))
        case .notSent:
            break
        }
    }

    private func metadata(_ send: PendingSend, _ reason: String) -> LogMetadata {
        ["outbox.event_key": send.delivery.eventKey, "device.id": send.delivery.deviceId,
         "device.token": Redact.token(send.delivery.token), "fcm.error": reason]
    }

    // MARK: The writer

    /// Flushes until closed and empty. Lingers `completerFlushDelay` only when the first item arrives at an
    /// idle writer (to gather a batch); items that piled up during a write are flushed at once.
    func run() async {
        while true {
            guard let parked = await waitForItems() else { return }
            let full = state.withLock { $0.buffer.count >= configuration.completerFlushCount || $0.closed }
            if parked && !full { try? await Task.sleep(for: configuration.completerFlushDelay) }
            let (batch, reasons) = state.withLock { state -> (OutboxStore.Completion, [String: String]) in
                defer { state.buffer = OutboxStore.Completion(); state.disableReasons.removeAll(keepingCapacity: true) }
                return (state.buffer, state.disableReasons)
            }
            await write(batch, disableReasons: reasons)
        }
    }

    /// Waits until something is buffered: true when it had to wait (the writer was idle), false when items were
    /// already there, nil when closed with nothing left.
    private func waitForItems() async -> Bool? {
        var parked = false
        while true {
            let ready = state.withLock { state -> Bool? in
                if !state.buffer.isEmpty { return true }
                return state.closed ? false : nil
            }
            if let ready { return ready ? parked : nil }
            parked = true
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Park until `add` or `close`; re-checked under the lock so no wake-up is lost.
                let waiting = state.withLock { state -> Bool in
                    guard state.buffer.isEmpty, !state.closed else { return false }
                    state.waiter = continuation
                    return true
                }
                if !waiting { continuation.resume() }
            }
        }
    }

    /// One transaction for the batch. A database outage is ridden out (results that cannot be written mean
    /// duplicate pushes later); a statement the server refuses is retried item by item so one bad row
    /// cannot hold the others back.
    private func write(_ batch: OutboxStore.Completion, disableReasons: [String: String]) async {
        var attempt = 0
        while true {
            do {
                let summary = try await store.complete(batch, maxAttempts: configuration.maxAttempts)
                afterWrite(summary, disableReasons: disableReasons)
                return
            } catch let error as PostgresError where error.isConnectionError {
                attempt += 1
                if attempt == 1 { logger.warning("cannot record delivery results; retrying", metadata: ["error": "\(error)"]) }
                if attempt >= 40 {
                    logger.error("gave up recording delivery results: leases expire and the work is retried",
                                 metadata: ["error": "\(error)", "outbox.items": "\(batch.count)"])
                    return
                }
                try? await Task.sleep(for: .milliseconds(250))
            } catch {
                guard batch.count > 1 else {
                    logger.error("a result was refused by the database", metadata: ["error": "\(error)"])
                    if let settlement = batch.settlements.first {
                        // An event whose outcome cannot be written would be claimed again forever: it goes DEAD with the reason.
                        let reason = (error as? PostgresError).map { "outcome refused by the database: SQLSTATE \($0.sqlState ?? "?"): \($0.message.prefix(300))" }
                            ?? "outcome refused by the database"
                        await write(OutboxStore.Completion(finished: [FinishedEvent(id: settlement.id, lease: settlement.lease, status: .dead,
                                                                                    reason: reason)]), disableReasons: [:])
                    }
                    return
                }
                for single in batch.singles { await write(single, disableReasons: disableReasons) }
                return
            }
        }
    }

    private func afterWrite(_ summary: OutboxStore.CompletionSummary, disableReasons: [String: String]) {
        for device in summary.disabledDevices {
            let reason = disableReasons[device] ?? "unknown"
            metrics.tokenDisabled(reason)
            logger.notice("device disabled", metadata: ["device.id": device, "fcm.error": reason])
        }
        var settled = false
        for (id, status) in summary.eventStatuses {
            metrics.eventFinished(status)
            if status == "DEAD" { logger.warning("outbox event is DEAD", metadata: ["outbox.id": "\(id)"]) }
            if status != "PENDING" { settled = true }
        }
        if settled || !summary.eventStatuses.isEmpty { onSettled() }
    }
}
