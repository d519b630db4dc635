import FoundationEssentials
import Postgres
import Timekeeping

/// The delivery pipeline's statements on the outbox and its deliveries other than the fan-out (`DeliveryFanOut`): the claim,
/// the completion, leases. Each method is one short transaction; no transaction stays open while HTTP requests are in
/// flight.
package struct OutboxStore: Sendable {
    let client: PostgresClient
    let settings: PipelineSettings

    init(client: PostgresClient) {
        self.client = client
        settings = PipelineSettings(client)
    }

    // MARK: Claim

    /// Due PENDING rows, oldest first, locked with SKIP LOCKED, leased to `worker` under `token` for `lease`, attempt
    /// counted, each with its age (`EventFate.atClaim` decides whether it expired). The locked rows are updated by their
    /// tuple ids (`ctid = ANY(…)`: a TID lookup whatever the statistics say, not a second walk of the primary key, nor
    /// a hash join against the whole table as a plan made on an empty table chose): locked, they cannot move.
    package static func claimQuery(limit: Int, worker: String, token: LeaseToken, lease: Duration) -> PostgresQuery {
        """
        WITH due AS (
            SELECT ctid FROM "PushOutbox"
            WHERE status = \(literal: OutboxStatus.pending) AND "availableAt" <= now()
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
        let rows = try await client.query(Self.claimQuery(limit: limit, worker: workerId, token: token, lease: lease),
                                          settings: settings(.chosen))
        let id = rows.column("id"), eventType = rows.column("eventType"), patientId = rows.column("patientId"), payload = rows.column("payload")
        let attempts = rows.column("attempts"), age = rows.column("age_seconds"), displayName = rows.column("display_name")
        let createdAt = rows.column("createdAt")
        return try rows.map { row in
            ClaimedEvent(id: try row[id].decode(Int64.self), eventType: try row[eventType].string(), patientId: try row[patientId].string(),
                         payload: try row[payload].string(), attempts: try row[attempts].int(), ageSeconds: try row[age].double(),
                         displayName: row[displayName].optionalString(), lease: token, createdAt: try row[createdAt].date())
        }.sorted { $0.id < $1.id }
    }
}
