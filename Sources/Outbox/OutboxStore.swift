import Foundation
import Postgres
import Timekeeping

/// Every SQL statement of the delivery pipeline. Each method is one short transaction; no
/// transaction stays open while HTTP requests are in flight.
struct OutboxStore: Sendable {
    let client: PostgresClient

    /// The client's settings for the completer's and heartbeat's transactions, whose every statement updates rows by
    /// primary key (`TransactionSettings.forKeyedStatements`).
    let keyedSettings: TransactionSettings

    init(client: PostgresClient) {
        self.client = client
        keyedSettings = client.settings.forKeyedStatements()
    }

    // MARK: Claim

    /// Due PENDING rows, oldest first, locked with SKIP LOCKED, leased for `lease`, attempt counted.
    static let claimSQL = """
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
                  o."createdAt" < now() - make_interval(secs => $5::double precision) AS expired,
                  (SELECT p."displayName" FROM "Patient" p WHERE p.id = o."patientId") AS display_name,
                  o."createdAt"
        """

    /// Claims up to `limit` due events under a new lease.
    func claim(limit: Int, workerId: String, lease: Duration, maxAge: Duration) async throws -> [ClaimedEvent] {
        let token = LeaseToken()
        let rows = try await client.query(Self.claimSQL, [
            .int(limit), .text(workerId), .text(token.text), .double(lease.asSeconds), .double(maxAge.asSeconds),
        ])
        return try rows.map { row in
            ClaimedEvent(id: Int64(try row[0].int()), eventType: try row[1].string(), patientId: try row[2].string(),
                         payload: try row[3].string(), attempts: try row[4].int(), expired: try row[5].bool(),
                         displayName: row[6].optionalString(), lease: token, createdAt: try row[7].date())
        }.sorted { $0.id < $1.id }
    }

    // MARK: Fan-out

    /// The whole fan-out in one statement (one round trip, each delivery row written once before its result):
    /// - `inserted`: one delivery per (event, enabled caregiver device), inserted already leased; a device
    ///   already in the table for the key is skipped (the unique index decides);
    /// - `reclaimed`: PENDING deliveries of the keys from an earlier attempt or a crashed worker, leased again;
    /// - `failed`: a PENDING delivery whose device was disabled since it was inserted will never be sent.
    /// The three touch disjoint rows (the UPDATEs see only rows that existed before the statement).
    static let fanOutSQL = fanOutCTEs + """

        SELECT x.id, x."eventKey", x."pushDeviceId", d.token, now() AS claimed_at
        FROM (SELECT * FROM inserted UNION ALL SELECT * FROM reclaimed) x
        JOIN "PushDevice" d ON d.id = x."pushDeviceId"
        """

    /// The data-modifying part of `fanOutSQL` (data-modifying CTEs must be at the top level, so the
    /// benchmark's pgbench script appends its own final SELECT to these).
    static let fanOutCTEs = """
        WITH inserted AS (
            INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, attempts, "createdAt", "leaseToken", "leaseExpiresAt")
            SELECT gen_random_uuid()::text, e.key, d.id, 'PENDING', 1, now(), $3::uuid,
                   now() + make_interval(secs => $4::double precision)
            FROM unnest($1::text[], $2::text[]) AS e(key, patient_id)
            JOIN "CaregiverPatientLink" l ON l."patientId" = e.patient_id AND l.status = 'ACTIVE'
            JOIN "PushDevice" d ON d."ownerType" = 'CAREGIVER' AND d."ownerId" = l."caregiverId" AND d."isEnabled"
            ON CONFLICT ("eventKey", "pushDeviceId") DO NOTHING
            RETURNING id, "eventKey", "pushDeviceId"
        ), reclaimed AS (
            UPDATE "PushDelivery" pd
            SET attempts = pd.attempts + 1, "leaseToken" = $3::uuid,
                "leaseExpiresAt" = now() + make_interval(secs => $4::double precision)
            FROM "PushDevice" d
            WHERE pd."eventKey" = ANY($1::text[]) AND pd.status = 'PENDING'
              AND d.id = pd."pushDeviceId" AND d."isEnabled"
              AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
            RETURNING pd.id, pd."eventKey", pd."pushDeviceId"
        ), failed AS (
            UPDATE "PushDelivery" pd
            SET status = 'FAILED', "lastError" = 'device disabled before send', "leaseToken" = NULL, "leaseExpiresAt" = NULL
            FROM "PushDevice" d
            WHERE pd."eventKey" = ANY($1::text[]) AND pd.status = 'PENDING' AND d.id = pd."pushDeviceId" AND NOT d."isEnabled"
              AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
            RETURNING pd.id
        )
        """

    /// An event to fan out: its key and patient.
    struct FanOutRequest: Sendable {
        var id: Int64
        var eventKey: String
        var patientId: String
    }

    /// Fans out the events (their patients exist) and leases every sendable PENDING delivery of their
    /// keys under `token`: one statement, atomic on its own. Returns the deliveries this worker now holds.
    func fanOut(_ events: [FanOutRequest], token: LeaseToken, lease: Duration) async throws -> [ClaimedDelivery] {
        var keys: [String] = []
        var patients: [String] = []
        var seen = Set<String>()
        for event in events where seen.insert(event.eventKey).inserted {
            keys.append(event.eventKey)
            patients.append(event.patientId)
        }
        guard !keys.isEmpty else { return [] }
        let rows = try await client.query(Self.fanOutSQL, [.textArray(keys), .textArray(patients), .text(token.text), .double(lease.asSeconds)])
        var deliveries: [ClaimedDelivery] = []
        deliveries.reserveCapacity(rows.count)
        for row in rows {
            deliveries.append(ClaimedDelivery(id: try row[0].string(), eventKey: try row[1].string(), deviceId: try row[2].string(),
                                              token: try row[3].string(), claimedAt: try row[4].date(), lease: token))
        }
        return deliveries
    }
}
