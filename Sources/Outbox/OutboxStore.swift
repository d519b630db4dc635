import FoundationEssentials
import Postgres
import Timekeeping

/// Every SQL statement of the delivery pipeline. Each method is one short transaction; no
/// transaction stays open while HTTP requests are in flight.
struct OutboxStore: Sendable {
    let client: PostgresClient

    /// The client's settings for the claim, the fan-out, the completer's and the heartbeat's transactions, whose every
    /// statement finds its rows by an index (`TransactionSettings.forKeyedStatements`).
    let keyedSettings: TransactionSettings
    /// `keyedSettings` with generic plans: the completer's and the heartbeat's transactions, many a second
    /// (`TransactionSettings.forFrequentStatements`).
    let frequentSettings: TransactionSettings

    init(client: PostgresClient) {
        self.client = client
        keyedSettings = client.settings.forKeyedStatements()
        frequentSettings = keyedSettings.forFrequentStatements()
    }

    // MARK: Claim

    /// Due PENDING rows, oldest first, locked with SKIP LOCKED, leased to `worker` under `token` for `lease`, attempt
    /// counted, each with its age (`EventFate.atClaim` decides whether it expired). The locked rows are updated by their
    /// tuple ids (`ctid = ANY(…)`: a TID lookup whatever the statistics say, not a second walk of the primary key, nor
    /// a hash join against the whole table as a plan made on an empty table chose): locked, they cannot move.
    static func claimQuery(limit: Int, worker: String, token: LeaseToken, lease: Duration) -> PostgresQuery {
        """
        WITH due AS (
            SELECT ctid FROM "PushOutbox"
            WHERE status = 'PENDING' AND "availableAt" <= now()
            ORDER BY "availableAt", id
            LIMIT \(limit)
            FOR UPDATE SKIP LOCKED
        )
        UPDATE "PushOutbox" o
        SET attempts = o.attempts + 1, "leasedBy" = \(worker), "leaseToken" = \(token.text)::uuid,
            "leaseExpiresAt" = now() + make_interval(secs => \(lease.asSeconds)::double precision),
            "availableAt" = now() + make_interval(secs => \(lease.asSeconds)::double precision)
        WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM due))
        RETURNING o.id, o."eventType", o."patientId", o.payload::text AS payload, o.attempts,
                  extract(epoch FROM now() - o."createdAt")::double precision AS age_seconds,
                  (SELECT p."displayName" FROM "Patient" p WHERE p.id = o."patientId") AS display_name,
                  o."createdAt"
        """
    }

    /// Claims up to `limit` due events under a new lease.
    func claim(limit: Int, workerId: String, lease: Duration) async throws -> [ClaimedEvent] {
        let token = LeaseToken()
        let rows = try await client.query(Self.claimQuery(limit: limit, worker: workerId, token: token, lease: lease), settings: keyedSettings)
        let id = rows.column("id"), eventType = rows.column("eventType"), patientId = rows.column("patientId"), payload = rows.column("payload")
        let attempts = rows.column("attempts"), age = rows.column("age_seconds"), displayName = rows.column("display_name")
        let createdAt = rows.column("createdAt")
        return try rows.map { row in
            ClaimedEvent(id: try row[id].decode(Int64.self), eventType: try row[eventType].string(), patientId: try row[patientId].string(),
                         payload: try row[payload].string(), attempts: try row[attempts].int(), ageSeconds: try row[age].double(),
                         displayName: row[displayName].optionalString(), lease: token, createdAt: try row[createdAt].date())
        }.sorted { $0.id < $1.id }
    }

    // MARK: Fan-out

    /// The whole fan-out in one statement (one round trip, each delivery row written once before its result):
    /// - `targets`: every enabled caregiver device of each event's patient, with its token (read once, here);
    /// - `inserted`: one delivery per target, inserted already leased; a device already in the table for the key is
    ///   skipped (the unique index decides);
    /// - `earlier`: the keys that can hold deliveries from before this statement: the insert skipped one of their
    ///   devices, they have no sendable device now, or their event is on a second or later attempt (`retried`). A key met
    ///   for the first time has none, so the two probes below skip it (they were an index probe per key on every
    ///   fan-out);
    /// - `reclaimed`: PENDING deliveries of those keys from an earlier attempt or a crashed worker, leased again;
    /// - `failed`: a PENDING delivery of those keys whose device was disabled since it was inserted will never be sent.
    /// Both probes find their rows by key and look each row's device up by id (a scalar subquery: a probe per row
    /// whatever the statistics say; written as a join, a plan took the few disabled devices as the outer side and
    /// walked all 20,000 devices on every fan-out). `EventFate.reclaimed` is the rule the two apply.
    /// The three writes touch disjoint rows (the UPDATEs see only rows that existed before the statement). A retried
    /// event is always probed, so a delivery left by an earlier attempt to a device that is no longer a target (its
    /// devices replaced since) is failed or resent on that attempt, never left to exhaust the attempts.
    static func fanOutQuery(keys: [String], patients: [String], token: LeaseToken, lease: Duration, retried: [String]) -> PostgresQuery {
        """
        \(sql: fanOutCTEs(keys: keys, patients: patients, token: token, lease: lease, retried: retried))
        SELECT i.id, i."eventKey", i."pushDeviceId", t.token, now() AS claimed_at
        FROM inserted i JOIN targets t ON t.key = i."eventKey" AND t.device_id = i."pushDeviceId"
        UNION ALL
        SELECT r.id, r."eventKey", r."pushDeviceId", r.token, now() FROM reclaimed r
        """
    }

    /// `EventFate.reclaimed`'s reason for a delivery whose device was disabled before it was sent, as an SQL literal.
    static let deviceDisabledReason = PostgresQuery(stringLiteral: "'" + EventFate.deviceDisabledBeforeSend.replacing("'", with: "''") + "'")

    /// A new delivery's id: a UUID version 7 (RFC 9562) as text: 48 bits of Unix milliseconds, then random bits (a
    /// random version-4 UUID with its first six bytes replaced and its version nibble turned from 4 into 7). Ids that
    /// grow with time land at the right edge of the primary-key index, as a sequence's would; random ones dirtied a
    /// random leaf page per insert, and each leaf's first change after a checkpoint writes the whole page to WAL.
    static let deliveryIdSQL: PostgresQuery = """
        encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            placing substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
            52, 1), 53, 1), 'hex')::uuid::text
        """

    /// The data-modifying part of `fanOutQuery` (data-modifying CTEs must be at the top level, so the
    /// benchmark's pgbench script appends its own final SELECT to these): `keys[i]` is an event of patient `patients[i]`.
    static func fanOutCTEs(keys: [String], patients: [String], token: LeaseToken, lease: Duration, retried: [String]) -> PostgresQuery {
        """
        WITH targets AS MATERIALIZED (
            SELECT DISTINCT e.key, d.id AS device_id, d.token
            FROM unnest(\(keys)::text[], \(patients)::text[]) AS e(key, patient_id)
            JOIN "CaregiverPatientLink" l ON l."patientId" = e.patient_id AND l.status = 'ACTIVE'
            JOIN "PushDevice" d ON d."ownerType" = 'CAREGIVER' AND d."ownerId" = l."caregiverId" AND d."isEnabled"
        ), inserted AS (
            INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, attempts, "createdAt", "leaseToken", "leaseExpiresAt")
            SELECT \(sql: deliveryIdSQL), t.key, t.device_id, 'PENDING', 1, now(), \(token.text)::uuid,
                   now() + make_interval(secs => \(lease.asSeconds)::double precision)
            FROM targets t
            ON CONFLICT ("eventKey", "pushDeviceId") DO NOTHING
            RETURNING id, "eventKey", "pushDeviceId"
        ), earlier AS (
            SELECT t.key FROM targets t
            WHERE NOT EXISTS (SELECT 1 FROM inserted i WHERE i."eventKey" = t.key AND i."pushDeviceId" = t.device_id)
            UNION
            SELECT k.key FROM unnest(\(keys)::text[]) AS k(key) WHERE NOT EXISTS (SELECT 1 FROM targets t WHERE t.key = k.key)
            UNION
            SELECT unnest(\(retried)::text[])
        ), reclaimed AS (
            UPDATE "PushDelivery" pd
            SET attempts = pd.attempts + 1, "leaseToken" = \(token.text)::uuid,
                "leaseExpiresAt" = now() + make_interval(secs => \(lease.asSeconds)::double precision)
            WHERE pd."eventKey" = ANY(ARRAY(SELECT key FROM earlier)) AND pd.status = 'PENDING'
              AND (SELECT d."isEnabled" FROM "PushDevice" d WHERE d.id = pd."pushDeviceId")
              AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
            RETURNING pd.id, pd."eventKey", pd."pushDeviceId", (SELECT d.token FROM "PushDevice" d WHERE d.id = pd."pushDeviceId") AS token
        ), failed AS (
            UPDATE "PushDelivery" pd
            SET status = 'FAILED', "lastError" = \(sql: deviceDisabledReason), "leaseToken" = NULL, "leaseExpiresAt" = NULL
            WHERE pd."eventKey" = ANY(ARRAY(SELECT key FROM earlier)) AND pd.status = 'PENDING'
              AND NOT (SELECT d."isEnabled" FROM "PushDevice" d WHERE d.id = pd."pushDeviceId")
              AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
            RETURNING pd.id
        )
        """
    }

    /// An event to fan out: its key and patient.
    struct FanOutRequest: Sendable {
        var id: Int64
        var eventKey: String
        var patientId: String
        /// The claim's attempt number: past the first, deliveries of earlier attempts may exist.
        var attempts: Int = 1
    }

    /// Fans out the events (their patients exist) and leases every sendable PENDING delivery of their
    /// keys under `token`: one statement, atomic on its own. Returns the deliveries this worker now holds.
    func fanOut(_ events: [FanOutRequest], token: LeaseToken, lease: Duration) async throws -> [ClaimedDelivery] {
        var keys: [String] = []
        var patients: [String] = []
        var retried: [String] = []
        var seen = Set<String>()
        for event in events where seen.insert(event.eventKey).inserted {
            keys.append(event.eventKey)
            patients.append(event.patientId)
            if event.attempts > 1 { retried.append(event.eventKey) }
        }
        guard !keys.isEmpty else { return [] }
        let rows = try await client.query(Self.fanOutQuery(keys: keys, patients: patients, token: token, lease: lease, retried: retried),
                                          settings: keyedSettings)
        let id = rows.column("id"), eventKey = rows.column("eventKey"), deviceId = rows.column("pushDeviceId"), deviceToken = rows.column("token")
        let claimedAt = rows.column("claimed_at")
        var deliveries: [ClaimedDelivery] = []
        deliveries.reserveCapacity(rows.count)
        // Every row's claimed_at is the statement's now(): read once, unless a row says otherwise.
        var lastClaimedAt: (text: String, date: Date)?
        for row in rows {
            let cell = row[claimedAt]
            let text = try cell.string()
            let date: Date
            if let lastClaimedAt, lastClaimedAt.text == text { date = lastClaimedAt.date } else {
                date = try cell.date()
                lastClaimedAt = (text, date)
            }
            deliveries.append(ClaimedDelivery(id: try row[id].string(), eventKey: try row[eventKey].string(), deviceId: try row[deviceId].string(),
                                              token: try row[deviceToken].string(), claimedAt: date, lease: token))
        }
        return deliveries
    }
}
