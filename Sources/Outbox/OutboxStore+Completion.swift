import Foundation
import Postgres

extension OutboxStore {
    /// The outcome of one delivery, ready to be written.
    public enum DeliveryResult: Sendable {
        case sent(messageName: String)
        case failed(reason: String)
        /// Failed, and the device's token is dead: disable it unless re-registered after `claimedAt`.
        case tokenInvalid(reason: String, deviceId: String, claimedAt: Date)
        case retry(reason: String)
    }

    /// The outcome of one event, ready to be written.
    public struct EventCompletion: Sendable {
        public var id: Int64
        public var eventKey: String
        /// Delay before the next attempt if deliveries are still pending.
        public var retryDelay: Duration
        /// Recorded as `"lastError"` when the event stays PENDING or goes DEAD.
        public var error: String?

        public init(id: Int64, eventKey: String, retryDelay: Duration, error: String? = nil) {
            self.id = id
            self.eventKey = eventKey
            self.retryDelay = retryDelay
            self.error = error
        }
    }

    public static let markSentSQL = """
        UPDATE "PushDelivery" pd
        SET status = 'SENT', "sentAt" = now(), "fcmMessageId" = v.name, "lastError" = NULL,
            "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM unnest($1::text[], $2::text[]) AS v(id, name)
        WHERE pd.id = v.id AND pd."leaseToken" = $3::uuid AND pd.status = 'PENDING'
        """

    public static let markFailedSQL = """
        UPDATE "PushDelivery" pd
        SET status = 'FAILED', "lastError" = v.reason, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM unnest($1::text[], $2::text[]) AS v(id, reason)
        WHERE pd.id = v.id AND pd."leaseToken" = $3::uuid AND pd.status = 'PENDING'
        """

    public static let markRetrySQL = """
        UPDATE "PushDelivery" pd
        SET "lastError" = v.reason, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM unnest($1::text[], $2::text[]) AS v(id, reason)
        WHERE pd.id = v.id AND pd."leaseToken" = $3::uuid AND pd.status = 'PENDING'
        """

    /// Disables devices whose token FCM called dead, unless the app re-registered them after the send began.
    public static let disableDevicesSQL = """
        UPDATE "PushDevice" d
        SET "isEnabled" = false, "updatedAt" = now()
        FROM unnest($1::text[], $2::timestamptz[]) AS v(id, started)
        WHERE d.id = v.id AND d."isEnabled" AND d."lastSeenAt" < v.started
        RETURNING d.id
        """

    /// DONE when no delivery of the key is PENDING; else DEAD after the last attempt, else due again after the delay.
    public static let completeEventsSQL = """
        WITH v AS (
            SELECT * FROM unnest($1::bigint[], $2::text[], $3::double precision[], $4::text[]) AS v(id, key, delay, err)
        ), p AS (
            SELECT v.*, EXISTS (
                SELECT 1 FROM "PushDelivery" pd WHERE pd."eventKey" = v.key AND pd.status = 'PENDING'
            ) AS pending FROM v
        )
        UPDATE "PushOutbox" o
        SET status = CASE WHEN NOT p.pending THEN 'DONE' WHEN o.attempts >= $5 THEN 'DEAD' ELSE 'PENDING' END,
            "processedAt" = CASE WHEN NOT p.pending OR o.attempts >= $5 THEN now() END,
            "availableAt" = CASE WHEN p.pending AND o.attempts < $5
                                 THEN now() + make_interval(secs => p.delay) ELSE o."availableAt" END,
            "lastError" = CASE WHEN NOT p.pending THEN NULL
                               WHEN o.attempts >= $5 THEN 'attempts exhausted (' || o.attempts || '): ' || coalesce(p.err, 'deliveries still pending')
                               ELSE p.err END,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM p
        WHERE o.id = p.id AND o."leaseToken" = $6::uuid AND o.status = 'PENDING'
        RETURNING o.id, o.status
        """

    /// Final states decided without sending (bad input → DEAD, too old → EXPIRED).
    public static let finishEventsSQL = """
        UPDATE "PushOutbox" o
        SET status = v.status, "processedAt" = now(), "lastError" = v.err,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM unnest($1::bigint[], $2::text[], $3::text[]) AS v(id, status, err)
        WHERE o.id = v.id AND o."leaseToken" = $4::uuid AND o.status = 'PENDING'
        """

    /// What the completion wrote.
    public struct CompletionSummary: Sendable {
        /// Event id → status written (events whose lease was lost are absent).
        public var eventStatuses: [Int64: String] = [:]
        /// Devices actually disabled.
        public var disabledDevices: [String] = []
    }

    /// Writes delivery results and event outcomes in one transaction, guarded by the lease token:
    /// a worker that lost its lease changes nothing.
    public func complete(deliveries: [(id: String, result: DeliveryResult)], events: [EventCompletion],
                         finished: [(id: Int64, status: String, error: String)], token: UUID, maxAttempts: Int,
                         durable: Bool = true) async throws -> CompletionSummary {
        try await client.withTransaction { connection in
            if !durable {
                // Per-delivery results: if PostgreSQL itself crashes before flushing this commit, the
                // delivery is still PENDING and is sent again (a duplicate, never a loss). A worker
                // crash loses nothing: the commit is already in PostgreSQL's memory.
                try connection.query("SET LOCAL synchronous_commit = off")
            }
            var sent: ([String], [String]) = ([], [])
            var failed: ([String], [String]) = ([], [])
            var retry: ([String], [String]) = ([], [])
            var disable: ([String], [Date]) = ([], [])
            for (id, result) in deliveries {
                switch result {
                case .sent(let name): sent.0.append(id); sent.1.append(name)
                case .failed(let reason): failed.0.append(id); failed.1.append(reason)
                case .retry(let reason): retry.0.append(id); retry.1.append(reason)
                case .tokenInvalid(let reason, let deviceId, let claimedAt):
                    failed.0.append(id); failed.1.append(reason)
                    disable.0.append(deviceId); disable.1.append(claimedAt)
                }
            }
            let tokenText = PostgresValue.text(token.uuidString)
            if !sent.0.isEmpty { try connection.query(Self.markSentSQL, [.textArray(sent.0), .textArray(sent.1), tokenText]) }
            if !failed.0.isEmpty { try connection.query(Self.markFailedSQL, [.textArray(failed.0), .textArray(failed.1), tokenText]) }
            if !retry.0.isEmpty { try connection.query(Self.markRetrySQL, [.textArray(retry.0), .textArray(retry.1), tokenText]) }
            var summary = CompletionSummary()
            if !disable.0.isEmpty {
                summary.disabledDevices = try connection.query(Self.disableDevicesSQL, [.textArray(disable.0), .timestampArray(disable.1)])
                    .map { try $0["id"].string() }
            }
            if !finished.isEmpty {
                try connection.query(Self.finishEventsSQL, [
                    .intArray(finished.map(\.id)), .textArray(finished.map(\.status)), .textArray(finished.map(\.error)), tokenText,
                ])
                for item in finished { summary.eventStatuses[item.id] = item.status }
            }
            if !events.isEmpty {
                let rows = try connection.query(Self.completeEventsSQL, [
                    .intArray(events.map(\.id)), .textArray(events.map(\.eventKey)),
                    .doubleArray(events.map(\.retryDelay.asSeconds)), .optionalTextArray(events.map(\.error)),
                    .int(maxAttempts), tokenText,
                ])
                for row in rows { summary.eventStatuses[Int64(try row["id"].int())] = try row["status"].string() }
            }
            return summary
        }
    }

    public static let releaseEventsSQL = """
        UPDATE "PushOutbox"
        SET "availableAt" = now(), attempts = greatest(attempts - 1, 0),
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        WHERE id = ANY($1::bigint[]) AND "leaseToken" = $2::uuid AND status = 'PENDING'
        """

    public static let releaseDeliveriesSQL = """
        UPDATE "PushDelivery"
        SET "leaseToken" = NULL, "leaseExpiresAt" = NULL, attempts = greatest(attempts - 1, 0)
        WHERE "leaseToken" = $1::uuid AND status = 'PENDING'
        """

    /// Gives unfinished work back (graceful stop): the events are due again at once, the attempt uncounted.
    public func release(eventIds: [Int64], token: UUID) async throws {
        try await client.withTransaction { connection in
            try connection.query(Self.releaseDeliveriesSQL, [.text(token.uuidString)])
            try connection.query(Self.releaseEventsSQL, [.intArray(eventIds), .text(token.uuidString)])
        }
    }
}
