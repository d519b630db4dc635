import Postgres

/// The tokens a disabling answer's dry run goes to (SPEC §3, "a disable needs a witness"): devices that received a push
/// lately, newest first, still enabled. FCM accepted them with this project's key, so FCM refusing one of them too says
/// the project (the key, the URL, a proxy) is at fault, not the token.
package struct KnownGoodTokens: Sendable {
    let client: PostgresClient

    package init(client: PostgresClient) {
        self.client = client
    }

    /// What the database offers a dry run: at most `limit` tokens other than `excluding` (the suspects), each the newest
    /// of its owner, from the newest SENT deliveries this worker recorded (`"sentAt"` set; the API's inline-sender rows
    /// carry none), and how many unwitnessed disables the fleet has made since FCM last accepted a push
    /// (`OutboxStore.unwitnessedDisableCap` allows 10).
    package struct Candidates: Sendable, Equatable {
        package var tokens: [String]
        package var unwitnessedDisables: Int
    }

    /// nil when the database could not be asked (no verdict then, rather than a new deployment's).
    package func newest(excluding: [String], limit: Int = 4) async -> Candidates? {
        do {
            let rows = try await client.query(Self.query(excluding: excluding, limit: limit))
            return Candidates(tokens: rows.compactMap { $0["token"].optionalString() },
                              unwitnessedDisables: try rows.first?["unwitnessed"].int() ?? 0)
        } catch {
            return nil
        }
    }

    /// One row per token (one row with a NULL token when there is none), each with the fleet's unwitnessed disables.
    /// Walks `"PushDelivery_createdAt_idx"` backwards over the newest 2,000 SENT rows (more than every instance's sends
    /// on the wire, so the suspects' own last pushes cannot hide the others); a backlog of PENDING rows is skipped. One
    /// token per owner: the witnesses are several people's phones, so no one account's phones are all of them.
    static func query(excluding: [String], limit: Int) -> PostgresQuery {
        """
        SELECT u.unwitnessed, t.token FROM (
            SELECT \(sql: unwitnessedSinceAcceptedSQL) AS unwitnessed
        ) u LEFT JOIN (
            SELECT token, "sentAt" FROM (
                SELECT DISTINCT ON (d."ownerId") d.token, s."sentAt" FROM (
                    SELECT pd."pushDeviceId", pd."sentAt" FROM "PushDelivery" pd
                    WHERE pd.status = \(literal: DeliveryStatus.sent) AND pd."sentAt" IS NOT NULL
                    ORDER BY pd."createdAt" DESC LIMIT 2000
                ) s JOIN "PushDevice" d ON d.id = s."pushDeviceId"
                WHERE d."isEnabled" AND d.token <> ALL(\(excluding)::text[])
                ORDER BY d."ownerId", s."sentAt" DESC
            ) n ORDER BY "sentAt" DESC LIMIT \(limit)
        ) t ON true
        ORDER BY t."sentAt" DESC
        """
    }

    /// The unwitnessed disables the fleet's allowance counts: those not undone, made since FCM last accepted a push
    /// (the newest SENT delivery's `"sentAt"`). "At most 10 until the first 200" (SPEC §3), counted again after each: a
    /// deployment whose only phones that ever got a push die may disable them without a witness, however many a new
    /// deployment's first day used.
    package static let unwitnessedSinceAcceptedSQL: PostgresQuery = """
        (SELECT count(*) FROM "PushDeviceDisabled" l
         WHERE NOT l.witnessed AND l."restoredAt" IS NULL
           AND l."disabledAt" > coalesce((SELECT pd."sentAt" FROM "PushDelivery" pd
                                          WHERE pd.status = \(literal: DeliveryStatus.sent) AND pd."sentAt" IS NOT NULL
                                          ORDER BY pd."createdAt" DESC LIMIT 1), '-infinity'))
        """
}
