import FoundationEssentials
import Logging

/// Extends the leases of events and deliveries still held, every sixth of the lease: queued, in flight,
/// and answered but not yet written. So neither a long send queue nor a slow database lets another
/// instance (or this one) claim work this one has sent. What could not be extended (taken over,
/// finished elsewhere) is marked lost and is not sent.
struct LeaseHeartbeat: Sendable {
    let store: OutboxStore
    let book: EngineBook
    /// Shared with the completer: one of them writes at a time.
    let turn: WriteTurn
    let configuration: DeliveryEngineConfiguration
    let logger: Logger

    /// The time between extensions: a sixth of the lease, so that a beat late by half the lease still renews before
    /// the dispatcher's margin (a third) stops sends.
    var interval: Duration { configuration.lease / 6 }

    /// Runs until `isStopped` (checked after each pause of `interval`).
    func run(pause: @Sendable (Duration) async -> Void, isStopped: @Sendable () -> Bool) async {
        while true {
            await pause(interval)
            if isStopped() { return }
            await beat()
        }
    }

    /// One extension of every lease held.
    func beat() async {
        let held = book.transition { $0.heldLeases() }
        guard !held.events.isEmpty || !held.deliveries.isEmpty else { return }
        // The renewal counts from before the statement was sent: the database's new expiry is later than this.
        let started = ContinuousClock.now
        do {
            let kept = try await turn.run { () async -> Result<(events: Set<Int64>, deliveries: Set<String>), any Error> in
                do { return .success(try await store.extendLeases(events: held.events, deliveries: held.deliveries, lease: configuration.lease)) }
                catch { return .failure(error) }
            }.get()
            // Keyed by lease too: a row written meanwhile and claimed again by this instance holds a new lease.
            let lostEvents = Set(held.events.filter { !kept.events.contains($0.id) }.map { EngineStateMachine.Held(id: "\($0.id)", lease: $0.lease) })
            let lostDeliveries = Set(held.deliveries.filter { !kept.deliveries.contains($0.id) }.map { EngineStateMachine.Held(id: $0.id, lease: $0.lease) })
            let keptEvents = Set(held.events.filter { kept.events.contains($0.id) }.map { EngineStateMachine.Held(id: "\($0.id)", lease: $0.lease) })
            let lease = configuration.lease
            book.transition { $0.renewed(events: keptEvents, deadline: started + lease) }
            let lost = lostEvents.isEmpty && lostDeliveries.isEmpty
                ? 0 : book.transition { $0.markLost(events: lostEvents, deliveries: lostDeliveries) }
            if lost > 0 {
                logger.warning("lease lost for events still in progress; their unsent deliveries are dropped",
                               metadata: ["outbox.lost": "\(lost)"])
            }
        } catch {
            logger.warning("cannot extend leases; retrying", metadata: ["error": "\(error)"])
        }
    }
}
