import FoundationEssentials
import Postgres
import Timekeeping

/// The fan-out: an event's recipients (`Recipients`) as PENDING deliveries leased to this worker, with the deliveries
/// of earlier attempts leased again or ended, in one statement. Between the claim and the completion (`OutboxStore`):
/// it needs the claimed event's parsed payload.
package struct DeliveryFanOut: Sendable {
    let client: PostgresClient
    /// The store's (`OutboxStore.settings`): one plan policy for the pipeline's statements.
    let settings: PipelineSettings

    /// The whole fan-out in one statement (one round trip, each delivery row written once before its result). An event
    /// is its (patient, key): events that share a key never share a send. `linked` finds each event's caregiver devices
    /// and whether each speaks for its token (docs/operations.md, "Who gets the push"), `inserted` leases a delivery per
    /// speaking device, and `waiting` probes earlier attempts' PENDING deliveries row by row (docs/benchmark.md, "Latency:
    /// plans made on an empty queue"), which `reclaimed` leases again and `failed` ends with their reason. The final
    /// SELECT returns the deliveries this worker now holds, then the devices skipped for their token (`id` NULL).
    static func fanOutQuery(keys: [String], patients: [String], token: LeaseToken, lease: Duration, retried: [String]) -> PostgresQuery {
        """
        \(sql: fanOutCTEs(keys: keys, patients: patients, token: token, lease: lease, retried: retried))
        SELECT i.id, i."eventKey", i."pushDeviceId", i."patientId", t.token, now() AS claimed_at
        FROM inserted i JOIN linked t ON t.key = i."eventKey" AND t.device_id = i."pushDeviceId"
        UNION ALL
        SELECT r.id, r."eventKey", r."pushDeviceId", r."patientId", r.token, now() FROM reclaimed r
        UNION ALL
        SELECT NULL, t.key, t.device_id, t.patient_id, NULL, now() FROM linked t WHERE NOT t.speaks
        """
    }

    /// A new delivery's id: a UUID version 7 (RFC 9562) as text: 48 bits of Unix milliseconds, then random bits (a
    /// random version-4 UUID with its first six bytes replaced and its version nibble turned from 4 into 7). Ids that
    /// grow with time land at the right edge of the primary-key index, as a sequence's would; random ones dirtied a
    /// random leaf page per insert, and each leaf's first change after a checkpoint writes the whole page to WAL.
    static let deliveryIdSQL: PostgresQuery = """
        encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            placing substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
            52, 1), 53, 1), 'hex')::uuid::text
        """

    /// The recipients rule (`Recipients.refusal`) over device `d` (NULL when deleted) of a delivery for patient
    /// `e.patient_id`: NULL when the delivery may still be sent, else why not (`EventFate.notSent`).
    static let refusalSQL = Recipients.refusal(device: "d", patient: "e.patient_id") { Recipients.literal(EventFate.notSent($0)) }

    /// The data-modifying part of `fanOutQuery` (data-modifying CTEs must be at the top level, so the
    /// benchmark's pgbench script appends its own final SELECT to these): `keys[i]` is an event of patient `patients[i]`.
    package static func fanOutCTEs(keys: [String], patients: [String], token: LeaseToken, lease: Duration, retried: [String]) -> PostgresQuery {
        """
        WITH events AS (
            SELECT * FROM unnest(\(keys)::text[], \(patients)::text[]) WITH ORDINALITY AS e(key, patient_id, ord)
        ), linked AS MATERIALIZED (
            SELECT DISTINCT ON (e.key, d.id) e.key, e.patient_id, d.id AS device_id, d.token, \(sql: Recipients.speaksForToken("d")) AS speaks
            FROM events e \(sql: Recipients.linkedDevices(patient: "e.patient_id"))
            ORDER BY e.key, d.id, e.ord -- a device two events of one key reach goes with the first (one delivery per key and device)
        ), inserted AS (
            INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", "patientId", status, attempts, "createdAt", "leaseToken", "leaseExpiresAt")
            SELECT \(sql: deliveryIdSQL), t.key, t.device_id, t.patient_id, \(literal: DeliveryStatus.pending), 1, now(), \(token.text)::uuid,
                   now() + make_interval(secs => \(lease.asSeconds)::double precision)
            FROM linked t WHERE t.speaks
            ON CONFLICT ("eventKey", "pushDeviceId") DO NOTHING -- a row the inline sender wrote is SENT and stays so
            RETURNING id, "eventKey", "pushDeviceId", "patientId"
        ), earlier AS (
            -- Events that can hold deliveries from before this statement; one met for the first time has none.
            SELECT t.key, t.patient_id FROM linked t
            WHERE t.speaks AND NOT EXISTS (SELECT 1 FROM inserted i WHERE i."eventKey" = t.key AND i."pushDeviceId" = t.device_id)
            UNION
            SELECT e.key, e.patient_id FROM events e
            WHERE e.key = ANY(\(retried)::text[])
               OR NOT EXISTS (SELECT 1 FROM linked t WHERE t.key = e.key AND t.patient_id = e.patient_id AND t.speaks)
        ), waiting AS MATERIALIZED (
            -- A row with no patient was fanned out by a worker before migration 7: it goes with the events of its key.
            -- The refusal is an OFFSET 0 subquery, one probe per row whatever the statistics say: as a join, a plan
            -- walked every device on each fan-out.
            SELECT pd.id, e.patient_id, (SELECT \(sql: refusalSQL)
                                        FROM (SELECT 1) one LEFT JOIN "PushDevice" d ON d.id = pd."pushDeviceId" OFFSET 0) AS refusal
            FROM earlier e JOIN "PushDelivery" pd ON pd."eventKey" = e.key AND (pd."patientId" = e.patient_id OR pd."patientId" IS NULL)
            WHERE pd.status = \(literal: DeliveryStatus.pending) AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
        ), reclaimed AS (
            UPDATE "PushDelivery" pd
            SET attempts = pd.attempts + 1, "patientId" = w.patient_id, "leaseToken" = \(token.text)::uuid,
                "leaseExpiresAt" = now() + make_interval(secs => \(lease.asSeconds)::double precision)
            FROM waiting w
            WHERE pd.id = w.id AND w.refusal IS NULL
              AND pd.status = \(literal: DeliveryStatus.pending) AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
            RETURNING pd.id, pd."eventKey", pd."pushDeviceId", pd."patientId",
                      (SELECT d.token FROM "PushDevice" d WHERE d.id = pd."pushDeviceId") AS token
        ), failed AS (
            UPDATE "PushDelivery" pd
            SET status = \(literal: DeliveryStatus.failed), "lastError" = w.refusal, "patientId" = w.patient_id, "leaseToken" = NULL, "leaseExpiresAt" = NULL
            FROM waiting w
            WHERE pd.id = w.id AND w.refusal IS NOT NULL
              AND pd.status = \(literal: DeliveryStatus.pending) AND (pd."leaseExpiresAt" IS NULL OR pd."leaseExpiresAt" < now())
            RETURNING pd.id
        )
        """
    }

    /// Fan-outs of at most this many events take the generic plan (`PlanPolicy.generic`, costed for ten rows per
    /// `unnest`); larger ones `PlanPolicy.chosen`.
    static let genericPlanFanOut = 10

    /// An event to fan out: its key and patient.
    struct Request: Sendable {
        var id: Int64
        var eventKey: String
        var patientId: String
        /// The claim's attempt number: past the first, deliveries of earlier attempts may exist.
        var attempts: Int = 1
    }

    /// What a fan-out took: the deliveries this worker now holds, and the devices not sent to because another
    /// registration speaks for their token.
    struct Result: Sendable {
        var deliveries: [ClaimedDelivery] = []
        var skipped: [(eventKey: String, patientId: String, deviceId: String)] = []
    }

    /// Fans out the events (their patients exist) and leases every sendable PENDING delivery of them under `token`:
    /// one statement, atomic on its own.
    func deliveries(for events: [Request], token: LeaseToken, lease: Duration) async throws -> Result {
        struct Event: Hashable { var key: String, patient: String }
        var keys: [String] = []
        var patients: [String] = []
        var retried: [String] = []
        var seen = Set<Event>()
        for event in events where seen.insert(Event(key: event.eventKey, patient: event.patientId)).inserted {
            keys.append(event.eventKey)
            patients.append(event.patientId)
            if event.attempts > 1 { retried.append(event.eventKey) }
        }
        guard !keys.isEmpty else { return Result() }
        // A fan-out of a few events (a quiet queue): planning it afresh cost about 1 ms a time, half the enqueue-to-FCM
        // latency at 500 events/s. A batch: custom plans ran faster.
        let policy: PlanPolicy = keys.count <= Self.genericPlanFanOut ? .generic : .chosen
        let rows = try await client.query(Self.fanOutQuery(keys: keys, patients: patients, token: token, lease: lease, retried: retried),
                                          settings: settings(policy))
        let id = rows.column("id"), eventKey = rows.column("eventKey"), deviceId = rows.column("pushDeviceId"), deviceToken = rows.column("token")
        let patientId = rows.column("patientId"), claimedAt = rows.column("claimed_at")
        var result = Result()
        result.deliveries.reserveCapacity(rows.count)
        // Every row's claimed_at is the statement's now(): read once, unless a row says otherwise.
        var lastClaimedAt: (text: String, date: Date)?
        for row in rows {
            guard let deliveryId = row[id].optionalString() else {
                result.skipped.append((try row[eventKey].string(), try row[patientId].string(), try row[deviceId].string()))
                continue
            }
            let cell = row[claimedAt]
            let text = try cell.string()
            let date: Date
            if let lastClaimedAt, lastClaimedAt.text == text { date = lastClaimedAt.date } else {
                date = try cell.date()
                lastClaimedAt = (text, date)
            }
            result.deliveries.append(ClaimedDelivery(id: deliveryId, eventKey: try row[eventKey].string(), patientId: try row[patientId].string(),
                                                     deviceId: try row[deviceId].string(), token: try row[deviceToken].string(),
                                                     claimedAt: date, lease: token))
        }
        return result
    }
}
