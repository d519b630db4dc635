import FoundationEssentials
import Lifecycle
import Logging

/// Extends the leases of events and deliveries still held, every sixth of the lease: queued, in flight,
/// and answered but not yet written. So neither a long send queue nor a slow database lets another
/// instance (or this one) claim work this one has sent. What could not be extended (taken over,
/// finished elsewhere) is reported to the engine loop as lost and is not sent.
struct LeaseHeartbeat: PeriodicJob {
    let store: OutboxStore
    let engine: EngineLoop
    /// Shared with the completer: one of them writes at a time.
    let turn: WriteTurn
    let configuration: DeliveryEngineConfiguration
    let logger: Logger

    /// The time between extensions: a sixth of the lease, so that a beat late by half the lease still renews before
    /// the loop's margin (a third) stops sends.
    var interval: Duration { configuration.lease / 6 }

    func rest(after round: Int?) async -> Duration { interval }

    func roundFailed(_ error: any Error) {
        logger.warning("cannot extend leases; retrying", metadata: ["error": "\(error)"])
    }

    /// The first extension is one interval after the start: a claim's lease is fresh.
    func run(until stop: StopSignal) async {
        await stop.sleep(for: interval)
        guard !stop.isRequested else { return }
        await runRounds(until: stop)
    }

    /// One extension of every lease held; returns the groups newly lost.
    func runOnce(until stop: StopSignal) async throws -> Int {
        let held = await engine.heldLeases()
        guard !held.events.isEmpty || !held.deliveries.isEmpty else { return 0 }
        // The renewal counts from before the statement was sent: the database's new expiry is later than this.
        let started = ContinuousClock.now
        let kept = try await turn.run { () async -> Result<(events: Set<Int64>, deliveries: Set<String>), any Error> in
            do { return .success(try await store.extendLeases(events: held.events, deliveries: held.deliveries, lease: configuration.lease)) }
            catch { return .failure(error) }
        }.get()
        // Keyed by lease too: a row written meanwhile and claimed again by this instance holds a new lease.
        let lostEvents = Set(held.events.filter { !kept.events.contains($0.id) }.map { EngineStateMachine.Held(id: "\($0.id)", lease: $0.lease) })
        let lostDeliveries = Set(held.deliveries.filter { !kept.deliveries.contains($0.id) }.map { EngineStateMachine.Held(id: $0.id, lease: $0.lease) })
        let keptEvents = Set(held.events.filter { kept.events.contains($0.id) }.map { EngineStateMachine.Held(id: "\($0.id)", lease: $0.lease) })
        let lost = await engine.leases(renewed: keptEvents, deadline: started + configuration.lease, lost: lostEvents, lostDeliveries: lostDeliveries)
        if lost > 0 {
            logger.warning("lease lost for events still in progress; their unsent deliveries are dropped", metadata: ["outbox.lost": "\(lost)"])
        }
        return lost
    }
}
