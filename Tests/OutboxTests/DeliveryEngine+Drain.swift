import Lifecycle
@testable import Outbox
import Postgres

extension DeliveryEngine {
    /// Runs the engine as the daemon does (`run(until:)`) until the outbox holds nothing for it, then stops it as a
    /// SIGTERM does and returns the events it claimed meanwhile (`push_outbox_claimed_total`). "Nothing for it": no
    /// PENDING event is due and none is leased to this worker (every event it claimed is settled), read from the
    /// database every few milliseconds. It also stops once those reads failed for two seconds in a row (the database
    /// went away), or after a minute: a test whose work never settles fails on its assertions, not by hanging.
    @discardableResult
    func drain() async throws -> Int {
        let before = metrics.claimedTotal
        let stop = StopSignal()
        async let running: Void = run(until: stop)
        let deadline = ContinuousClock.now + .seconds(60)
        var failingSince: ContinuousClock.Instant?
        while ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
            do {
                if try await outboxIsQuiet() { break }
                failingSince = nil
            } catch {
                let since = failingSince ?? .now
                if since.duration(to: .now) > .seconds(2) { break }
                failingSince = since
            }
        }
        stop.request(grace: .zero)
        await running
        return metrics.claimedTotal - before
    }

    /// No PENDING event is due, and none is leased to this worker.
    private func outboxIsQuiet() async throws -> Bool {
        let rows = try await store.client.query("""
            SELECT NOT EXISTS (
                SELECT 1 FROM "PushOutbox"
                WHERE status = \(literal: OutboxStatus.pending)
                  AND ("availableAt" <= now() OR ("leasedBy" = \(configuration.workerId) AND "leaseExpiresAt" > now()))
            ) AS quiet
            """)
        return try rows[0]["quiet"].bool()
    }
}
