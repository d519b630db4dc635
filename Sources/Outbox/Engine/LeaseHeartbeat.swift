import Foundation
import Logging

/// Extends the leases of events and deliveries still in progress, every third of the lease, so a
/// long send queue never lets another instance take over work this one is still sending. What
/// could not be extended (taken over, finished elsewhere) is marked lost and is not sent.
struct LeaseHeartbeat: Sendable {
    let store: OutboxStore
    let ledger: EventLedger
    let configuration: DeliveryEngineConfiguration
    let logger: Logger

    /// The time between extensions.
    var interval: Duration { configuration.lease / 3 }

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
        let held = ledger.heldLeases()
        guard !held.events.isEmpty || !held.deliveries.isEmpty else { return }
        do {
            let kept = try await store.extendLeases(events: held.events, deliveries: held.deliveries, lease: configuration.lease)
            let lost = ledger.markLost(checkedEvents: held.events.map(\.id), keptEvents: kept.events,
                                       checkedDeliveries: held.deliveries.map(\.id), keptDeliveries: kept.deliveries)
            if lost > 0 {
                logger.warning("lease lost for events still in progress; their unsent deliveries are dropped",
                               metadata: ["outbox.lost": "\(lost)"])
            }
        } catch {
            logger.warning("cannot extend leases; retrying", metadata: ["error": "\(error)"])
        }
    }
}
