import FoundationEssentials
import Postgres

/// Operator commands: `status` and `redrive`.
public struct OutboxAdmin: Sendable {
    let client: PostgresClient

    public init(client: PostgresClient) { self.client = client }

    /// A snapshot of the queue for `medication-worker status` and the metrics gauges.
    public struct Status: Sendable {
        /// Outbox rows by status (every status present, zero when none).
        public var events: [OutboxStatus: Int]
        /// Age of the oldest PENDING event, nil when none.
        public var oldestPendingSeconds: Double?
        /// PENDING events due now (not waiting for a retry).
        public var duePending: Int
        /// Deliveries created in the last hour, by status.
        public var recentDeliveries: [DeliveryStatus: Int]
        /// Table sizes in bytes (heap + indexes + TOAST).
        public var outboxBytes: Int
        public var deliveryBytes: Int
        /// Age of the oldest finished (DONE/EXPIRED) outbox row: what retention has not pruned yet.
        public var oldestFinishedSeconds: Double?
    }

    static let eventCountsSQL = """
        SELECT s.status, count(o.id) AS n
        FROM unnest(ARRAY['PENDING', 'DONE', 'DEAD', 'EXPIRED']) AS s(status)
        LEFT JOIN "PushOutbox" o ON o.status = s.status
        GROUP BY s.status
        """

    static let pendingSQL = """
        SELECT extract(epoch FROM now() - min("createdAt"))::double precision AS oldest,
               count(*) FILTER (WHERE "availableAt" <= now()) AS due
        FROM "PushOutbox" WHERE status = 'PENDING'
        """

    static let recentDeliveriesSQL = """
        SELECT status, count(*) AS n FROM "PushDelivery" WHERE "createdAt" > now() - interval '1 hour' GROUP BY status
        """

    static let sizesSQL = """
        SELECT pg_total_relation_size('"PushOutbox"') AS outbox, pg_total_relation_size('"PushDelivery"') AS delivery,
               (SELECT extract(epoch FROM now() - min("processedAt"))::double precision FROM "PushOutbox"
                WHERE status IN ('DONE', 'EXPIRED')) AS oldest_finished
        """

    /// Reads the queue's state (a few aggregate queries; cheap with the partial index).
    public func status(includeSizes: Bool = true) async throws -> Status {
        try await client.withConnection { connection in
            var events: [OutboxStatus: Int] = [:]
            for row in try connection.query(Self.eventCountsSQL) { events[try row["status"].decode(OutboxStatus.self)] = try row["n"].int() }
            let pending = try connection.query(Self.pendingSQL)[0]
            var recent: [DeliveryStatus: Int] = [.pending: 0, .sent: 0, .failed: 0]
            for row in try connection.query(Self.recentDeliveriesSQL) { recent[try row["status"].decode(DeliveryStatus.self)] = try row["n"].int() }
            var status = Status(events: events, oldestPendingSeconds: pending["oldest"].isNull ? nil : try pending["oldest"].double(),
                                duePending: try pending["due"].int(), recentDeliveries: recent,
                                outboxBytes: 0, deliveryBytes: 0, oldestFinishedSeconds: nil)
            if includeSizes {
                let sizes = try connection.query(Self.sizesSQL)[0]
                status.outboxBytes = try sizes["outbox"].int()
                status.deliveryBytes = try sizes["delivery"].int()
                status.oldestFinishedSeconds = sizes["oldest_finished"].isNull ? nil : try sizes["oldest_finished"].double()
            }
            return status
        }
    }

    static let redriveAllSQL = """
        UPDATE "PushOutbox"
        SET status = 'PENDING', attempts = 0, "availableAt" = now(), "processedAt" = NULL,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        WHERE status = 'DEAD'
        RETURNING id
        """

    static let redriveOneSQL = """
        UPDATE "PushOutbox"
        SET status = 'PENDING', attempts = 0, "availableAt" = now(), "processedAt" = NULL,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        WHERE status = 'DEAD' AND id = $1
        RETURNING id
        """

    /// Why a single-event redrive did nothing.
    public struct RedriveError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Makes DEAD events PENDING again (all, or one), due at once, attempts reset; wakes the workers.
    /// `"lastError"` is kept for the record until the next outcome overwrites it.
    public func redrive(eventId: Int64? = nil) async throws -> [Int64] {
        try await client.withTransaction { connection in
            let rows: PostgresRows
            if let eventId {
                rows = try connection.query(Self.redriveOneSQL, [.int(eventId)])
                if rows.isEmpty {
                    let found = try connection.query(#"SELECT status FROM "PushOutbox" WHERE id = $1"#, [.int(eventId)])
                    let why = found.isEmpty ? "no outbox event has id \(eventId)"
                        : "outbox event \(eventId) is \(try found[0]["status"].string()), not DEAD"
                    throw RedriveError(description: why)
                }
            } else {
                rows = try connection.query(Self.redriveAllSQL)
            }
            if !rows.isEmpty { try connection.query("SELECT pg_notify('push_outbox', '')") }
            return try rows.map { Int64(try $0["id"].int()) }
        }
    }
}
