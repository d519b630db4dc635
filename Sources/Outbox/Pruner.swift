import FoundationEssentials
import Lifecycle
import Logging
import Metrics
import Postgres
import Timekeeping

/// Deletes finished history in small batches so the tables stay small for years (docs/operations.md, "Database").
/// One instance at a time: a pass runs only while this instance holds the `retention` lease row
/// (renewed before every batch), never a session lock a transaction pooler would keep held.
public final class Pruner: PeriodicJob {

    /// Retention settings.
    public struct Configuration: Sendable {
        public var outboxRetention: Duration
        public var deliveryRetention: Duration
        /// Rows per DELETE statement (each its own short transaction).
        public var batchSize = 1000

        public init(outboxRetention: Duration, deliveryRetention: Duration) {
            self.outboxRetention = outboxRetention
            self.deliveryRetention = deliveryRetention
        }

        /// At least once a minute; more often when a retention is shorter than two minutes.
        public var passInterval: Duration {
            min(.seconds(60), min(outboxRetention, deliveryRetention) / 2)
        }
    }

    /// What one pass removed; `ranPass` false when another instance held the lease.
    public struct PassSummary: Sendable, Equatable {
        public var ranPass: Bool
        public var outboxDeleted: Int
        public var deliveriesDeleted: Int
    }

    /// Up to `limit` DONE or EXPIRED events processed longer than `retention` ago.
    static func deleteOutboxQuery(retention: Duration, limit: Int) -> PostgresQuery {
        """
        DELETE FROM "PushOutbox" WHERE id IN (
            SELECT id FROM "PushOutbox"
            WHERE status IN (\(literal: OutboxStatus.done), \(literal: OutboxStatus.expired)) AND "processedAt" < now() - make_interval(secs => \(retention.asSeconds)::double precision)
            LIMIT \(limit))
        """
    }

    /// Up to `limit` deliveries created longer than `retention` ago whose event key has no PENDING event.
    static func deleteDeliveriesQuery(retention: Duration, limit: Int) -> PostgresQuery {
        """
        DELETE FROM "PushDelivery" WHERE id IN (
            SELECT pd.id FROM "PushDelivery" pd
            WHERE pd."createdAt" < now() - make_interval(secs => \(retention.asSeconds)::double precision)
              AND NOT EXISTS (SELECT 1 FROM "PushOutbox" o WHERE o.status = \(literal: OutboxStatus.pending) AND o."eventKey" = pd."eventKey")
            LIMIT \(limit))
        """
    }

    let client: PostgresClient
    let configuration: Configuration
    /// Held for a pass; outlives a pass interval so a slow batch never lets a second instance in.
    let lease: SingletonLease
    let logger: Logger
    let outboxDeleted: Counter
    let deliveriesDeleted: Counter

    public init(client: PostgresClient, configuration: Configuration, logger: Logger, metrics: MetricsRegistry) {
        self.client = client
        self.configuration = configuration
        self.lease = SingletonLease(name: "retention", duration: max(.seconds(120), configuration.passInterval * 2))
        self.logger = logger
        let help = "Rows deleted by retention, by table."
        outboxDeleted = metrics.counter("push_retention_deleted_rows_total", help: help, labels: ["table": "PushOutbox"])
        deliveriesDeleted = metrics.counter("push_retention_deleted_rows_total", help: help, labels: ["table": "PushDelivery"])
    }

    /// One pass: both tables until nothing old is left, unless another instance is pruning.
    public func runOnce(shouldStop: @escaping @Sendable () -> Bool = { false }) async throws -> PassSummary {
        let configuration = self.configuration
        let lease = self.lease
        let client = self.client
        // Each batch is its own short transaction; the lease is kept (renewed while the pass runs, a lost lease ends
        // it) so the same instance prunes next time.
        let pass = try await lease.whileHeld(on: client, releasing: false) { () async throws -> PassSummary in
            @Sendable func drain(_ statement: (Duration, Int) -> PostgresQuery, _ retention: Duration) async throws -> Int {
                var total = 0
                while !shouldStop() {
                    let deleted = try await client.query(statement(retention, configuration.batchSize)).affectedRows
                    total += deleted
                    if deleted < configuration.batchSize { break }
                }
                return total
            }
            let outbox = try await drain(Self.deleteOutboxQuery, configuration.outboxRetention)
            let deliveries = try await drain(Self.deleteDeliveriesQuery, configuration.deliveryRetention)
            return PassSummary(ranPass: true, outboxDeleted: outbox, deliveriesDeleted: deliveries)
        }
        guard let summary = pass else { return PassSummary(ranPass: false, outboxDeleted: 0, deliveriesDeleted: 0) }
        outboxDeleted.increment(by: Double(summary.outboxDeleted))
        deliveriesDeleted.increment(by: Double(summary.deliveriesDeleted))
        if summary.outboxDeleted + summary.deliveriesDeleted > 0 {
            logger.info("retention pass deleted old rows", metadata: [
                "retention.outbox_deleted": "\(summary.outboxDeleted)", "retention.deliveries_deleted": "\(summary.deliveriesDeleted)",
            ])
        }
        return summary
    }

    // A periodic job: a pass every `passInterval` until stop, then the lease is given up.
    public func runOnce(until stop: StopSignal) async throws -> PassSummary { try await runOnce { stop.isRequested } }
    public func rest(after round: PassSummary?) async -> Duration { configuration.passInterval }
    public func roundFailed(_ error: any Error) { logger.warning("retention pass failed", metadata: ["error": "\(error)"]) }
    public func finished() async { try? await lease.release(on: client) }
}
