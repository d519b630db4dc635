import FCM
import Foundation
import Logging
import Postgres

extension OutboxWorker {
    /// Validates, fans out, sends and completes one claimed batch.
    func process(_ events: [OutboxStore.ClaimedEvent], token: UUID) async throws {
        var finished: [(id: Int64, status: String, error: String)] = []
        var valid: [(claim: OutboxStore.ClaimedEvent, event: DoseTakenEvent)] = []
        for claim in events {
            if claim.expired {
                finished.append((claim.id, "EXPIRED", "older than EVENT_MAX_AGE when claimed; not sent"))
                continue
            }
            do {
                valid.append((claim, try DoseTakenEvent.parse(eventType: claim.eventType, patientId: claim.patientId,
                                                              payload: claim.payload)))
            } catch {
                finished.append((claim.id, "DEAD", error.reason))
                logger.warning("outbox event refused", metadata: ["outbox.id": "\(claim.id)", "error": error.reason])
            }
        }

        let fanOut = try await store.fanOut(events: valid.map { ($0.claim.id, $0.event.eventKey, $0.event.patientId) },
                                            token: token, lease: configuration.lease)
        var byKey: [String: (claim: OutboxStore.ClaimedEvent, event: DoseTakenEvent)] = [:]
        var live: [(claim: OutboxStore.ClaimedEvent, event: DoseTakenEvent)] = []
        for item in valid {
            guard fanOut.displayNames[item.event.patientId] != nil else {
                finished.append((item.claim.id, "DEAD", "unknown patient \(item.event.patientId.prefix(64)): no \"Patient\" row"))
                logger.warning("outbox event refused", metadata: ["outbox.id": "\(item.claim.id)", "error": "unknown patient"])
                continue
            }
            live.append(item)
            if byKey[item.event.eventKey] == nil { byKey[item.event.eventKey] = item }
        }

        let pushes: [(OutboxStore.ClaimedDelivery, DoseTakenPush)] = fanOut.deliveries.compactMap { delivery in
            guard let item = byKey[delivery.eventKey], let name = fanOut.displayNames[item.event.patientId] else { return nil }
            let event = item.event
            return (delivery, DoseTakenPush(token: delivery.token, eventKey: event.eventKey, patientId: event.patientId,
                                            displayName: name, date: event.date, slot: event.slot,
                                            recordingGroupId: event.recordingGroupId, withinTime: event.withinTime))
        }

        // Each outcome is written as soon as it arrives (batched with whatever else arrived during the
        // previous write), so a crash re-sends only what was in flight, not the whole batch.
        let recorder = DeliveryRecorder(store: store, token: token, maxAttempts: configuration.maxAttempts)
        let outcomes = await send(pushes) { delivery, outcome in
            recorder.add(delivery.id, Self.deliveryResult(delivery, outcome))
        }
        let recorded = await recorder.finish()
        let completedAll = outcomes.count == pushes.count && recorded.error == nil

        var retryByKey: [String: (after: Duration, reason: String)] = [:]
        for (delivery, outcome) in outcomes {
            let metadata: LogMetadata = ["outbox.event_key": delivery.eventKey, "device.id": delivery.deviceId,
                                         "device.token": Redact.token(delivery.token)]
            switch outcome {
            case .sent(let name):
                _ = name
                metrics.delivered("sent")
            case .tokenInvalid(let reason):
                metrics.delivered("token_invalid")
                logger.info("device token is no longer valid", metadata: metadata.merging(["fcm.error": reason]) { $1 })
            case .permanentFailure(let reason):
                metrics.delivered("failed")
                logger.error("push failed permanently; operator action needed", metadata: metadata.merging(["fcm.error": reason]) { $1 })
            case .retry(let reason, let after, let minimum):
                metrics.delivered("retry")
                let floor = max(after ?? .zero, minimum ?? .zero)
                let previous = retryByKey[delivery.eventKey]?.after ?? .zero
                retryByKey[delivery.eventKey] = (max(previous, floor), reason)
                logger.debug("push will be retried", metadata: metadata.merging(["fcm.error": reason]) { $1 })
            }
        }

        if !completedAll {
            // Stopping: record what finished, give everything else back (due again at once).
            let summary = try await store.complete(deliveries: [], events: [], finished: finished, token: token,
                                                   maxAttempts: configuration.maxAttempts)
            let open = live.map(\.claim.id).filter { summary.eventStatuses[$0] == nil }
            try await store.release(eventIds: open, token: token)
            logger.notice("released unfinished work on stop", metadata: ["outbox.released": "\(open.count)"])
            return
        }

        let completions = live.map { item in
            let retry = retryByKey[item.event.eventKey]
            let backoff = configuration.backoff.delay(afterAttempt: item.claim.attempts)
            return OutboxStore.EventCompletion(id: item.claim.id, eventKey: item.event.eventKey,
                                               retryDelay: max(backoff, retry?.after ?? .zero), error: retry?.reason)
        }
        let summary = try await store.complete(deliveries: [], events: completions, finished: finished, token: token,
                                               maxAttempts: configuration.maxAttempts)
        for device in recorded.disabledDevices {
            let reason = outcomes.first { $0.0.deviceId == device }.flatMap { outcome -> String? in
                if case .tokenInvalid(let reason) = outcome.1 { return reason }
                return nil
            } ?? "unknown"
            metrics.tokenDisabled(reason)
            logger.notice("device disabled", metadata: ["device.id": device, "fcm.error": reason])
        }
        for (id, status) in summary.eventStatuses {
            metrics.eventFinished(status)
            if status == "DEAD" {
                logger.warning("outbox event is DEAD", metadata: ["outbox.id": "\(id)"])
            }
        }
        logger.debug("batch done", metadata: ["outbox.claimed": "\(events.count)", "outbox.deliveries": "\(pushes.count)"])
    }

    /// Sends concurrently under the shared in-flight bound; on a stop past its grace period,
    /// returns only the outcomes that arrived.
    func send(_ pushes: [(OutboxStore.ClaimedDelivery, DoseTakenPush)],
              onOutcome: @escaping @Sendable (OutboxStore.ClaimedDelivery, SendOutcome) -> Void) async -> [(OutboxStore.ClaimedDelivery, SendOutcome)] {
        guard !pushes.isEmpty else { return [] }
        let collector = OutcomeCollector()
        let sender = self.sender
        let inFlight = self.inFlight
        let onProgress = self.onProgress
        let sending = Task {
            await withTaskGroup(of: Void.self) { group in
                for (delivery, push) in pushes {
                    await inFlight.acquire()
                    if Task.isCancelled { inFlight.release(); break }
                    group.addTask {
                        let outcome = await sender.send(push)
                        inFlight.release()
                        collector.add(delivery, outcome)
                        onOutcome(delivery, outcome)
                        onProgress()
                    }
                }
            }
        }
        // Whichever comes first: every send answered, or the stop's grace period ran out.
        let finish = OneShot()
        let watcher = Task { [stop] in await stop.waitForDeadline(); finish.fire() }
        Task { await sending.value; finish.fire() }
        await finish.wait()
        watcher.cancel()
        let arrived = collector.outcomes
        sending.cancel()
        return arrived
    }
}

extension OutboxWorker {
    /// The row update a send outcome calls for.
    static func deliveryResult(_ delivery: OutboxStore.ClaimedDelivery, _ outcome: SendOutcome) -> OutboxStore.DeliveryResult {
        switch outcome {
        case .sent(let name): .sent(messageName: name)
        case .tokenInvalid(let reason): .tokenInvalid(reason: reason, deviceId: delivery.deviceId, claimedAt: delivery.claimedAt)
        case .permanentFailure(let reason): .failed(reason: reason)
        case .retry(let reason, _, _): .retry(reason: reason)
        }
    }
}

/// Writes delivery results as they arrive: one write at a time, each taking everything that
/// accumulated during the previous one (natural batching, minimal delay after FCM's answer).
final class DeliveryRecorder: @unchecked Sendable {
    private let store: OutboxStore
    private let token: UUID
    private let maxAttempts: Int
    private let lock = NSLock()
    private var buffer: [(id: String, result: OutboxStore.DeliveryResult)] = []
    private var writing = false
    private var disabled: [String] = []
    private var failure: (any Error)?
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []

    init(store: OutboxStore, token: UUID, maxAttempts: Int) {
        self.store = store
        self.token = token
        self.maxAttempts = maxAttempts
    }

    func add(_ id: String, _ result: OutboxStore.DeliveryResult) {
        let start = lock.withLock { () -> Bool in
            buffer.append((id, result))
            if writing { return false }
            writing = true
            return true
        }
        if start { Task { await self.drain() } }
    }

    private func drain() async {
        while true {
            let batch = lock.withLock { () -> [(id: String, result: OutboxStore.DeliveryResult)] in
                defer { buffer.removeAll(keepingCapacity: true) }
                return buffer
            }
            if batch.isEmpty {
                let waiters = lock.withLock { () -> [CheckedContinuation<Void, Never>]? in
                    // Re-check under the lock: an add may have raced in.
                    guard buffer.isEmpty else { return nil }
                    writing = false
                    defer { idleWaiters.removeAll() }
                    return idleWaiters
                }
                guard let waiters else { continue }
                for waiter in waiters { waiter.resume() }
                return
            }
            // A result that cannot be written means a duplicate push later, so ride out a short database
            // outage (restart, failover) before giving up; the deliveries stay PENDING under their lease.
            var attempt = 0
            while true {
                do {
                    let summary = try await store.complete(deliveries: batch, events: [], finished: [], token: token,
                                                           maxAttempts: maxAttempts, durable: false)
                    lock.withLock { disabled += summary.disabledDevices }
                    break
                } catch let error as PostgresError where error.isConnectionError && attempt < 20 {
                    attempt += 1
                    try? await Task.sleep(for: .milliseconds(250))
                } catch {
                    lock.withLock { if failure == nil { failure = error } }
                    break
                }
            }
        }
    }

    /// Waits until every added result is written; returns the devices disabled and the first write error.
    func finish() async -> (disabledDevices: [String], error: (any Error)?) {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = lock.withLock { () -> Bool in
                if !writing && buffer.isEmpty { return true }
                idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
        return lock.withLock { (disabled, failure) }
    }
}

/// Thread-safe accumulation of send outcomes.
final class OutcomeCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [(OutboxStore.ClaimedDelivery, SendOutcome)] = []

    func add(_ delivery: OutboxStore.ClaimedDelivery, _ outcome: SendOutcome) {
        lock.withLock { stored.append((delivery, outcome)) }
    }

    var outcomes: [(OutboxStore.ClaimedDelivery, SendOutcome)] { lock.withLock { stored } }
}

/// Resumes its single waiter on the first `fire()`; later fires do nothing.
final class OneShot: @unchecked Sendable {
    private let lock = NSLock()
    private var fired = false
    private var waiter: CheckedContinuation<Void, Never>?

    func fire() {
        let resume = lock.withLock { () -> CheckedContinuation<Void, Never>? in
            guard !fired else { return nil }
            fired = true
            defer { waiter = nil }
            return waiter
        }
        resume?.resume()
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let already = lock.withLock { () -> Bool in
                if fired { return true }
                waiter = continuation
                return false
            }
            if already { continuation.resume() }
        }
    }
}
