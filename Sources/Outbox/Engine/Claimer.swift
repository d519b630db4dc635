import FoundationEssentials
import Logging
import Postgres
import Push

/// Claims due events, validates them and fans them out to devices; returns the groups to send and the events
/// finished without sending, for the engine loop. A statement that fails for a group of events is retried one event
/// at a time, so one bad row goes DEAD with the reason and the others go on; an event whose fan-out the database could
/// not finish this time (a lock wait past `lock_timeout`, a deadlock: `EventFate.fanOutFailed`) is a failed attempt,
/// due again after its backoff.
struct Claimer: Sendable {
    let store: OutboxStore
    let fanOut: DeliveryFanOut
    let configuration: DeliveryEngineConfiguration
    let metrics: PipelineMetrics
    let logger: Logger

    /// What one claim took: the groups to send (one per patient and eventKey), the events finished without sending (too old, bad
    /// input), and how many events it claimed.
    struct Claim: Sendable {
        var groups: [EngineLoop.Claimed] = []
        var finished: [FinishedEvent] = []
        var count = 0
    }

    /// Claims up to `limit` events and takes each as far as its sends.
    func claim(limit: Int) async throws -> Claim {
        // The leases this claim takes lapse LEASE_SECONDS after the statement was sent, by this process's clock.
        let leaseDeadline = ContinuousClock.now + configuration.lease
        let claimed = try await store.claim(limit: limit, workerId: configuration.workerId, lease: configuration.lease)
        guard !claimed.isEmpty else { return Claim() }
        metrics.claimed.increment(by: Double(claimed.count))
        var result = Claim(count: claimed.count)
        var finished: [FinishedEvent] = []
        var valid: [(claim: ClaimedEvent, event: DoseTakenEvent)] = []
        valid.reserveCapacity(claimed.count)
        for claim in claimed {
            switch EventFate.atClaim(ageSeconds: claim.ageSeconds, maxAge: configuration.eventMaxAge, eventType: claim.eventType,
                                     patientId: claim.patientId, payload: claim.payload, patientExists: claim.displayName != nil) {
            case .send(let event): valid.append((claim, event))
            case .expired(let reason): finished.append(FinishedEvent(id: claim.id, lease: claim.lease, status: .expired, reason: reason))
            case .dead(let reason): finished.append(dead(claim, reason))
            }
        }
        var retries: [(id: Int64, lease: LeaseToken, delay: Duration, reason: String)] = []
        do {
            result.groups = try await fanOut(valid, leaseDeadline: leaseDeadline, finished: &finished, retries: &retries)
        } catch {
            // The database went away mid-claim: give the events back (due again at once) if it is reachable, else
            // their leases expire by themselves.
            try? await store.release(events: claimed.map { ($0.id, $0.lease) }, deliveries: [])
            throw error
        }
        if !retries.isEmpty {
            // Not thrown: the groups above are leased and go to be sent. If this write fails, these events' leases
            // lapse by themselves, the attempt counted.
            do { try await store.retry(events: retries) } catch {
                logger.warning("could not write the events' next attempt; their leases will lapse",
                               metadata: ["outbox.id": retries.map { String($0.id) }.joined(separator: ","), "error": "\(error)"])
            }
        }
        result.finished = finished
        return result
    }

    private func dead(_ claim: ClaimedEvent, _ reason: String) -> FinishedEvent {
        logger.warning("outbox event refused", metadata: ["outbox.id": "\(claim.id)", "error": reason])
        return FinishedEvent(id: claim.id, lease: claim.lease, status: .dead, reason: reason)
    }

    /// One event's fan-out failed on its own: DEAD, or a failed attempt due again after its backoff.
    private func fanOutFailed(_ claim: ClaimedEvent, _ error: PostgresError, finished: inout [FinishedEvent],
                              retries: inout [(id: Int64, lease: LeaseToken, delay: Duration, reason: String)]) {
        switch EventFate.fanOutFailed(eventId: claim.id, attempts: claim.attempts, maxAttempts: configuration.maxAttempts,
                                      sqlState: error.sqlState, message: error.message, backoff: configuration.backoff) {
        case .dead(let reason):
            finished.append(dead(claim, reason))
        case .retry(let delay, let reason):
            logger.warning("fan-out not finished by the database; the event is due again", metadata: [
                "outbox.id": "\(claim.id)", "error": reason, "attempt": "\(claim.attempts)", "retry.in": "\(delay)",
            ])
            retries.append((claim.id, claim.lease, delay, reason))
        }
    }

    /// Fans out the valid events, isolating a statement failure to the event that causes it.
    private func fanOut(_ valid: [(claim: ClaimedEvent, event: DoseTakenEvent)], leaseDeadline: ContinuousClock.Instant,
                        finished: inout [FinishedEvent],
                        retries: inout [(id: Int64, lease: LeaseToken, delay: Duration, reason: String)]) async throws -> [EngineLoop.Claimed] {
        guard let token = valid.first?.claim.lease else { return [] }
        var groups: [EngineLoop.Claimed] = []
        let requests = valid.map { DeliveryFanOut.Request(id: $0.claim.id, eventKey: $0.event.eventKey, patientId: $0.event.patientId,
                                                                  attempts: $0.claim.attempts) }
        do {
            let result = try await fanOut.deliveries(for: requests, token: token, lease: configuration.lease)
            skipped(result.skipped, of: valid)
            groups += self.groups(valid, result.deliveries, leaseDeadline: leaseDeadline)
        } catch let error as PostgresError where !error.isConnectionError && valid.count > 1 {
            logger.notice("fan-out failed for a group of events; retrying them one at a time",
                          metadata: ["error": "\(error)", "outbox.events": "\(valid.count)"])
            for (index, item) in valid.enumerated() {
                do {
                    let result = try await fanOut.deliveries(for: [requests[index]], token: token, lease: configuration.lease)
                    skipped(result.skipped, of: [item])
                    groups += self.groups([item], result.deliveries, leaseDeadline: leaseDeadline)
                } catch let error as PostgresError where !error.isConnectionError {
                    fanOutFailed(item.claim, error, finished: &finished, retries: &retries)
                }
            }
        } catch let error as PostgresError where !error.isConnectionError {
            fanOutFailed(valid[0].claim, error, finished: &finished, retries: &retries)
        }
        return groups
    }

    /// Devices the fan-out did not send to because another registration speaks for their token: counted,
    /// and logged at debug level by their event's outbox id (`event ID` shows them to operators).
    private func skipped(_ skipped: [(eventKey: String, patientId: String, deviceId: String)],
                         of valid: [(claim: ClaimedEvent, event: DoseTakenEvent)]) {
        guard !skipped.isEmpty else { return }
        metrics.recipientsSkipped(.tokenSuperseded, count: skipped.count)
        for skip in skipped {
            logger.debug("device not sent to: another registration of its token was seen more recently",
                         metadata: ["outbox.id": Self.outboxIds(of: skip, in: valid), "device.id": skip.deviceId])
        }
    }

    /// The outbox ids of the claimed events of `skip`'s patient and key, as logs name an event (`12`, `12,13`).
    private static func outboxIds(of skip: (eventKey: String, patientId: String, deviceId: String),
                          in valid: [(claim: ClaimedEvent, event: DoseTakenEvent)]) -> String {
        valid.filter { $0.event.eventKey == skip.eventKey && $0.event.patientId == skip.patientId }.map { String($0.claim.id) }
            .joined(separator: ",")
    }

    /// One group per event (patient and eventKey) with its sends, in claim order (normally one event per group; two
    /// claimed rows of one patient and key share a group). Two patients' events that share a key (a reused
    /// `recordingGroupId`) are two groups: each push carries its own patient's name and dose.
    private func groups(_ valid: [(claim: ClaimedEvent, event: DoseTakenEvent)], _ fanOut: [ClaimedDelivery],
                        leaseDeadline: ContinuousClock.Instant) -> [EngineLoop.Claimed] {
        struct Event: Hashable { var patientId: String, eventKey: String }
        var groupOf: [Event: Int] = [:]
        groupOf.reserveCapacity(valid.count)
        var members: [[Int]] = []
        members.reserveCapacity(valid.count)
        for index in valid.indices {
            let event = Event(patientId: valid[index].event.patientId, eventKey: valid[index].event.eventKey)
            if let group = groupOf[event] {
                members[group].append(index)
            } else {
                groupOf[event] = members.count
                members.append([index])
            }
        }
        var deliveries = [[ClaimedDelivery]](repeating: [], count: members.count)
        for delivery in fanOut {
            if let group = groupOf[Event(patientId: delivery.patientId, eventKey: delivery.eventKey)] { deliveries[group].append(delivery) }
        }

        var result: [EngineLoop.Claimed] = []
        result.reserveCapacity(members.count)
        for (group, indexes) in members.enumerated() {
            let first = valid[indexes[0]]
            let key = first.event.eventKey
            var claimed = EngineLoop.Claimed(events: indexes.map { valid[$0].claim }, eventKey: key, leaseDeadline: leaseDeadline, sends: [])
            if !deliveries[group].isEmpty {
                let event = first.event
                let name = first.claim.displayName ?? ""
                // The same on every retry: the row's creation, not the claim, decides when the push goes stale.
                let createdAt = indexes.compactMap { valid[$0].claim.createdAt }.min()
                let expiration = createdAt.map { Int64(($0.timeIntervalSince1970 + configuration.eventMaxAge.asSeconds).rounded(.down)) }
                claimed.sends = deliveries[group].map { delivery in
                    (delivery, DoseTakenPush(token: delivery.token, eventKey: key, patientId: event.patientId, displayName: name,
                                             date: event.date, slot: event.slot, recordingGroupId: event.recordingGroupId,
                                             withinTime: event.withinTime, expiration: expiration), createdAt)
                }
            }
            result.append(claimed)
        }
        return result
    }
}
