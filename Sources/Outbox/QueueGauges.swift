import Foundation
import Metrics
import Postgres

/// Refreshes the queue gauges (`push_outbox_events{status}`, `push_outbox_oldest_pending_seconds`)
/// from the database; the daemon calls it every few seconds, never per scrape, so a scrape storm
/// cannot load the database.
public final class QueueGauges: Sendable {
    let admin: OutboxAdmin
    let events: [String: Gauge]
    let oldestPending: Gauge

    public init(client: PostgresClient, metrics: MetricsRegistry) {
        admin = OutboxAdmin(client: client)
        var events: [String: Gauge] = [:]
        for status in ["PENDING", "DONE", "DEAD", "EXPIRED"] {
            events[status] = metrics.gauge("push_outbox_events", help: "Outbox events by status.", labels: ["status": status])
        }
        self.events = events
        oldestPending = metrics.gauge("push_outbox_oldest_pending_seconds",
                                      help: "Age of the oldest PENDING outbox event in seconds (0 when none).")
    }

    /// Reads the queue once and updates the gauges; returns the snapshot for status lines.
    @discardableResult
    public func refresh() async throws -> OutboxAdmin.Status {
        let status = try await admin.status(includeSizes: false)
        for (name, gauge) in events { gauge.set(Double(status.events[name] ?? 0)) }
        oldestPending.set(status.oldestPendingSeconds ?? 0)
        return status
    }
}
