import FoundationEssentials
import Metrics
import Postgres

/// Refreshes the queue gauges (`push_outbox_events{status}`, `push_outbox_oldest_pending_seconds`);
/// the daemon calls it every few seconds, never per scrape, so a scrape storm cannot load the database.
///
/// The cost stays flat however much history retention keeps, and does not grow with the number
/// of instances:
/// - PENDING, DEAD and EXPIRED are counted through partial indexes that hold only those rows;
///   DONE, the bulk of the table, is an estimate from the finished index's statistics (kept fresh
///   by the table's aggressive autovacuum analyze settings);
/// - one instance at a time computes them (the `status` lease row) and publishes the snapshot
///   beside its lease; every instance exports the published snapshot.
public final class QueueGauges: Sendable {
    /// A queue snapshot.
    public struct Snapshot: Sendable, Equatable {
        /// Outbox rows by status (DONE estimated).
        public var events: [OutboxStatus: Int]
        /// Age of the oldest PENDING event in seconds, 0 when none.
        public var oldestPendingSeconds: Double
    }

    static let statuses = OutboxStatus.allCases

    /// Events PENDING, DEAD and EXPIRED (counted), finished (estimated from the index), the oldest PENDING one's age.
    static let countQuery: PostgresQuery = """
        SELECT (SELECT count(*) FROM "PushOutbox" WHERE status = 'PENDING') AS pending,
               (SELECT count(*) FROM "PushOutbox" WHERE status = 'DEAD') AS dead,
               (SELECT count(*) FROM "PushOutbox" WHERE status = 'EXPIRED') AS expired,
               (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass('"PushOutbox_finished_idx"')) AS finished,
               (SELECT coalesce(extract(epoch FROM now() - min("createdAt")), 0)::double precision
                FROM "PushOutbox" WHERE status = 'PENDING') AS oldest
        """

    let client: PostgresClient
    let lease: SingletonLease
    let events: [OutboxStatus: Gauge]
    let oldestPending: Gauge

    public init(client: PostgresClient, metrics: MetricsRegistry, interval: Duration = .seconds(5)) {
        self.client = client
        lease = SingletonLease(name: "status", duration: interval * 3)
        var events: [OutboxStatus: Gauge] = [:]
        for status in Self.statuses {
            events[status] = metrics.gauge("push_outbox_events", help: "Outbox events by status (DONE estimated from statistics).",
                                           labels: ["status": status.rawValue])
        }
        self.events = events
        oldestPending = metrics.gauge("push_outbox_oldest_pending_seconds",
                                      help: "Age of the oldest PENDING outbox event in seconds (0 when none).")
    }

    /// Computes the snapshot when this instance holds the `status` lease, else reads the one
    /// published by the instance that does; updates the gauges and returns the snapshot.
    @discardableResult
    public func refresh() async throws -> Snapshot {
        let lease = self.lease
        let client = self.client
        // The holder computes and publishes (and keeps the lease for the next refresh); the others read what it published.
        let computed = try await lease.whileHeld(on: client, releasing: false) {
            try await client.withConnection { connection -> Snapshot in
                let snapshot = try Self.compute(connection)
                try lease.publish(Self.encode(snapshot), on: connection)
                return snapshot
            }
        }
        let published = computed == nil
            ? try await client.withConnection { try SingletonLease.state(of: lease.name, on: $0).flatMap { Self.decode($0.state) } }
            : nil
        guard let snapshot = computed ?? published else { return Snapshot(events: [:], oldestPendingSeconds: 0) }
        for (name, gauge) in events { gauge.set(Double(snapshot.events[name] ?? 0)) }
        oldestPending.set(snapshot.oldestPendingSeconds)
        return snapshot
    }

    /// Gives the `status` lease up (on shutdown) so another instance takes over at once.
    public func release() async {
        try? await lease.release(on: client)
    }

    /// Counts the queue with the cheap statement.
    public static func compute(_ connection: PostgresConnection) throws -> Snapshot {
        let row = try connection.query(countQuery)[0]
        let expired = try row["expired"].int()
        let finished = try row["finished"].optionalInt() ?? 0
        return Snapshot(events: [.pending: try row["pending"].int(), .dead: try row["dead"].int(), .expired: expired,
                                 .done: max(0, finished - expired)],
                        oldestPendingSeconds: try row["oldest"].double())
    }

    static func encode(_ snapshot: Snapshot) -> String {
        (statuses.map { "\($0.rawValue)=\(snapshot.events[$0] ?? 0)" } + ["oldest=\(snapshot.oldestPendingSeconds)"]).joined(separator: " ")
    }

    static func decode(_ text: String) -> Snapshot? {
        var snapshot = Snapshot(events: [:], oldestPendingSeconds: 0)
        for field in text.split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            if parts[0] == "oldest" {
                snapshot.oldestPendingSeconds = Double(parts[1]) ?? 0
            } else {
                guard let status = OutboxStatus(rawValue: String(parts[0])) else { return nil }
                snapshot.events[status] = Int(parts[1]) ?? 0
            }
        }
        return snapshot
    }
}
