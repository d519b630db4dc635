import Foundation
import Postgres

/// Every SQL statement of the delivery pipeline. Each method is one short transaction; no
/// transaction stays open while HTTP requests are in flight.
public struct OutboxStore: Sendable {
    let client: PostgresClient

    public init(client: PostgresClient) { self.client = client }

    /// A claimed outbox row.
    public struct ClaimedEvent: Sendable {
        public var id: Int64
        public var eventType: String
        public var patientId: String
        public var payload: String
        /// Attempts including this one.
        public var attempts: Int
        /// Older than EVENT_MAX_AGE when claimed.
        public var expired: Bool
    }

    /// A leased PENDING delivery ready to send.
    public struct ClaimedDelivery: Sendable {
        public var id: String
        public var eventKey: String
        public var deviceId: String
        public var token: String
        /// Database time when the claim was made (the send's start for the re-registration guard).
        public var claimedAt: Date
    }

    // MARK: Claim

    /// Due PENDING rows, oldest first, locked with SKIP LOCKED, leased for `lease`, attempt counted.
    public static let claimSQL = """
        WITH due AS (
            SELECT id FROM "PushOutbox"
            WHERE status = 'PENDING' AND "availableAt" <= now()
            ORDER BY "availableAt", id
            LIMIT $1
            FOR UPDATE SKIP LOCKED
        )
        UPDATE "PushOutbox" o
        SET attempts = o.attempts + 1, "leasedBy" = $2, "leaseToken" = $3::uuid,
            "leaseExpiresAt" = now() + make_interval(secs => $4::double precision),
            "availableAt" = now() + make_interval(secs => $4::double precision)
        FROM due WHERE o.id = due.id
        RETURNING o.id, o."eventType", o."patientId", o.payload::text AS payload, o.attempts,
                  o."createdAt" < now() - make_interval(secs => $5::double precision) AS expired
        """

    /// Claims up to `limit` due events under `token`.
    public func claim(limit: Int, workerId: String, token: UUID, lease: Duration, maxAge: Duration) async throws -> [ClaimedEvent] {
        let rows = try await client.query(Self.claimSQL, [
            .int(limit), .text(workerId), .text(token.uuidString), .double(lease.asSeconds), .double(maxAge.asSeconds),
        ])
        return try rows.map { row in
            ClaimedEvent(id: Int64(try row["id"].int()), eventType: try row["eventType"].string(),
                         patientId: try row["patientId"].string(), payload: try row["payload"].string(),
                         attempts: try row["attempts"].int(), expired: try row["expired"].bool())
        }.sorted { $0.id < $1.id }
    }

    // MARK: Fan-out

    public static let patientsSQL = """
        SELECT id, "displayName" FROM "Patient" WHERE id = ANY($1::text[])
        """

    /// One delivery per (event, enabled caregiver device); a device already in the table for the key is skipped.
    public static let fanOutSQL = """
        INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, attempts, "createdAt")
        SELECT gen_random_uuid()::text, e.key, d.id, 'PENDING', 0, now()
        FROM unnest($1::text[], $2::text[]) AS e(key, patient_id)
        JOIN "CaregiverPatientLink" l ON l."patientId" = e.patient_id AND l.status = 'ACTIVE'
        JOIN "PushDevice" d ON d."ownerType" = 'CAREGIVER' AND d."ownerId" = l."caregiverId" AND d."isEnabled"
        ON CONFLICT ("eventKey", "pushDeviceId") DO NOTHING
        """

    /// Records each event's key with its deliveries (retention spares deliveries of PENDING events by key).
    public static let setEventKeysSQL = """
        UPDATE "PushOutbox" o SET "eventKey" = v.key
        FROM unnest($1::bigint[], $2::text[]) AS v(id, key)
        WHERE o.id = v.id AND o."eventKey" IS DISTINCT FROM v.key
        """

    /// A PENDING delivery whose device was disabled since it was inserted will never be sent.
    public static let failDisabledSQL = """
        UPDATE "PushDelivery" pd
        SET status = 'FAILED', "lastError" = 'device disabled before send', "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM "PushDevice" d
        WHERE pd."eventKey" = ANY($1::text[]) AND pd.status = 'PENDING' AND d.id = pd."pushDeviceId" AND NOT d."isEnabled"
          AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
        """

    /// Leases every sendable PENDING delivery of the keys, including ones a crashed worker inserted.
    public static let claimDeliveriesSQL = """
        UPDATE "PushDelivery" pd
        SET attempts = pd.attempts + 1, "leaseToken" = $2::uuid,
            "leaseExpiresAt" = now() + make_interval(secs => $3::double precision)
        FROM "PushDevice" d
        WHERE pd."eventKey" = ANY($1::text[]) AND pd.status = 'PENDING'
          AND d.id = pd."pushDeviceId" AND d."isEnabled"
          AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
        RETURNING pd.id, pd."eventKey", pd."pushDeviceId", d.token, now() AS claimed_at
        """

    /// Result of a fan-out: patients found and the deliveries this worker now holds.
    public struct FanOut: Sendable {
        public var displayNames: [String: String]
        public var deliveries: [ClaimedDelivery]
    }

    /// Looks up patients, inserts the deliveries of events whose patient exists, and leases every PENDING delivery.
    public func fanOut(events: [(id: Int64, eventKey: String, patientId: String)], token: UUID, lease: Duration) async throws -> FanOut {
        let patientIds = Array(Set(events.map(\.patientId)))
        return try await client.withTransaction { connection in
            var names: [String: String] = [:]
            for row in try connection.query(Self.patientsSQL, [.textArray(patientIds)]) {
                names[try row["id"].string()] = try row["displayName"].string()
            }
            let known = events.filter { names[$0.patientId] != nil }
            guard !known.isEmpty else { return FanOut(displayNames: names, deliveries: []) }
            try connection.query(Self.setEventKeysSQL, [.intArray(known.map(\.id)), .textArray(known.map(\.eventKey))])
            try connection.query(Self.fanOutSQL, [.textArray(known.map(\.eventKey)), .textArray(known.map(\.patientId))])
            let keys = Array(Set(known.map(\.eventKey)))
            try connection.query(Self.failDisabledSQL, [.textArray(keys)])
            let rows = try connection.query(Self.claimDeliveriesSQL, [.textArray(keys), .text(token.uuidString), .double(lease.asSeconds)])
            let deliveries = try rows.map { row in
                ClaimedDelivery(id: try row["id"].string(), eventKey: try row["eventKey"].string(),
                                deviceId: try row["pushDeviceId"].string(), token: try row["token"].string(),
                                claimedAt: try row["claimed_at"].date())
            }
            return FanOut(displayNames: names, deliveries: deliveries)
        }
    }
}
