import FoundationEssentials
import Metrics
import Postgres
import Synchronization
import Timekeeping

/// Refreshes the queue gauges (`push_outbox_events{status}`, `push_outbox_oldest_pending_seconds`) and the stale
/// registrations (`push_devices_stale{days}`); the daemon calls it every few seconds, never per scrape, so a scrape storm
/// cannot load the database.
///
/// The cost stays flat however much history retention keeps, and does not grow with the number
/// of instances:
/// - PENDING, DEAD and EXPIRED are counted through partial indexes that hold only those rows;
///   DONE, the bulk of the table, is an estimate from the finished index's statistics (kept fresh
///   by the table's aggressive autovacuum analyze settings);
/// - one instance at a time computes them (the `status` lease row) and publishes the snapshot
///   beside its lease; every instance exports the published snapshot;
/// - PENDING is counted through its partial index, which holds the backlog: a 1,000,000-delivery backlog made a count
///   cost 0.3–0.4 s (6% of PostgreSQL's time during that drain, at one count every 5 s). The holder counts again only
///   once `costFactor` times its last count's duration has passed, so the counts stay within 2% of one connection's
///   time at any backlog (every 5 s while a count takes under 0.1 s; every 20 s at 0.4 s); in between, every instance
///   reads the last snapshot;
/// - stale registrations (enabled devices not seen for 60 and 270 days) change by the day: the `status` holder counts
///   them at most every `staleInterval`, published beside a lease row of their own (`stale_devices`), so the queue
///   snapshot's format stays as instances of other versions read it.
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
        SELECT (SELECT count(*) FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.pending)) AS pending,
               (SELECT count(*) FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.dead)) AS dead,
               (SELECT count(*) FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.expired)) AS expired,
               (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass('"PushOutbox_finished_idx"')) AS finished,
               (SELECT coalesce(extract(epoch FROM now() - min("createdAt")), 0)::double precision
                FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.pending)) AS oldest
        """

    /// The ages (days without `"lastSeenAt"` moving) at which an enabled registration counts as stale: Firebase calls a
    /// token stale after a month or two without contact; 270 days is when FCM treats an Android token as expired.
    public static let staleDays = [60, 270]
    /// How often the stale registrations are counted again (a scan of the enabled devices; ages move by the day).
    public static let staleInterval: Duration = .seconds(600)

    /// Enabled caregiver devices not seen for each of `staleDays`; counts only, never ids.
    static let staleQuery: PostgresQuery = """
        SELECT count(*) FILTER (WHERE "lastSeenAt" < now() - interval '60 days') AS days_60,
               count(*) FILTER (WHERE "lastSeenAt" < now() - interval '270 days') AS days_270
        FROM "PushDevice" WHERE "isEnabled" AND "ownerType" = \(literal: OwnerType.caregiver) AND "lastSeenAt" < now() - interval '60 days'
        """

    /// A count is taken again once this many times its duration has passed (2% of a connection's time at most).
    static let costFactor = 50.0

    let client: PostgresClient
    let lease: SingletonLease
    /// How long the holder's last count took, in seconds.
    private let lastCost = Mutex(0.0)
    /// The stale counts' own row: taken by the `status` holder, its state `60=N 270=M`.
    let staleLease: SingletonLease
    let events: [OutboxStatus: Gauge]
    let oldestPending: Gauge
    let stale: [Int: Gauge]

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
        staleLease = SingletonLease(name: "stale_devices", duration: Self.staleInterval * 3)
        var stale: [Int: Gauge] = [:]
        for days in Self.staleDays {
            stale[days] = metrics.gauge("push_devices_stale",
                                        help: "Enabled push devices whose lastSeenAt is older than this many days (fleet-wide; still sent to).",
                                        labels: ["days": String(days)])
        }
        self.stale = stale
    }

    /// Computes the snapshot when this instance holds the `status` lease, else reads the one
    /// published by the instance that does; updates the gauges and returns the snapshot.
    @discardableResult
    public func refresh() async throws -> Snapshot {
        let lease = self.lease
        let client = self.client
        // The holder computes and publishes (and keeps the lease for the next refresh); the others read what it published.
        let staleLease = self.staleLease
        let computed = try await lease.whileHeld(on: client, releasing: false) {
            try await client.withConnection { connection -> Snapshot in
                try Self.countStaleIfDue(staleLease, connection)
                let last = try SingletonLease.state(of: lease.name, on: connection)
                if !Self.countIsDue(lastCostSeconds: self.lastCost.withLock { $0 }, publishedAgeSeconds: last?.ageSeconds),
                   let last, let snapshot = Self.decode(last.state) {
                    return snapshot
                }
                let started = ContinuousClock.now
                let snapshot = try Self.compute(connection)
                self.lastCost.withLock { $0 = (ContinuousClock.now - started).asSeconds }
                try lease.publish(Self.encode(snapshot), on: connection)
                return snapshot
            }
        }
        let (published, staleCounts) = try await client.withConnection { connection in
            (computed == nil ? try SingletonLease.state(of: lease.name, on: connection).flatMap { Self.decode($0.state) } : nil,
             try SingletonLease.state(of: staleLease.name, on: connection).flatMap { Self.decodeStale($0.state) })
        }
        if let staleCounts {
            for (days, gauge) in stale { gauge.set(Double(staleCounts[days] ?? 0)) }
        }
        guard let snapshot = computed ?? published else { return Snapshot(events: [:], oldestPendingSeconds: 0) }
        for (name, gauge) in events { gauge.set(Double(snapshot.events[name] ?? 0)) }
        oldestPending.set(snapshot.oldestPendingSeconds)
        return snapshot
    }

    /// Whether the holder counts the queue again: nothing published yet, or `costFactor` times the last count's
    /// duration has passed since it was published.
    static func countIsDue(lastCostSeconds: Double, publishedAgeSeconds: Double?) -> Bool {
        guard let age = publishedAgeSeconds else { return true }
        return age >= lastCostSeconds * costFactor
    }

    /// Counts the stale registrations and publishes them when this holder has the `stale_devices` row and the last count
    /// is older than `staleInterval` (or there is none).
    static func countStaleIfDue(_ staleLease: SingletonLease, _ connection: PostgresConnection) throws {
        guard try staleLease.acquire(connection) else { return }
        if let last = try SingletonLease.state(of: staleLease.name, on: connection), decodeStale(last.state) != nil,
           last.ageSeconds < staleInterval.asSeconds {
            return
        }
        try staleLease.publish(encodeStale(try countStale(connection)), on: connection)
    }

    /// Enabled devices not seen for each of `staleDays`.
    public static func countStale(_ connection: PostgresConnection) throws -> [Int: Int] {
        let row = try connection.query(staleQuery)[0]
        return [60: try row["days_60"].int(), 270: try row["days_270"].int()]
    }

    static func encodeStale(_ counts: [Int: Int]) -> String {
        staleDays.map { "\($0)=\(counts[$0] ?? 0)" }.joined(separator: " ")
    }

    static func decodeStale(_ text: String) -> [Int: Int]? {
        var counts: [Int: Int] = [:]
        for field in text.split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let days = Int(parts[0]), let count = Int(parts[1]) else { return nil }
            counts[days] = count
        }
        return counts.isEmpty ? nil : counts
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
