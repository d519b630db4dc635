import Postgres

/// The tokens a disabling answer's dry run goes to (SPEC §3, "a disable needs a witness"): devices that received a push
/// lately, newest first, still enabled. FCM accepted them with this project's key, so FCM refusing one of them too says
/// the project (the key, the URL, a proxy) is at fault, not the token.
package struct KnownGoodTokens: Sendable {
    let client: PostgresClient

    package init(client: PostgresClient) {
        self.client = client
    }

    /// What the database offers a dry run: at most `limit` distinct tokens other than `excluding` (the suspects), from
    /// the newest SENT deliveries this worker recorded (`"sentAt"` set; the API's inline-sender rows carry none), and
    /// how many unwitnessed disables the fleet has made (`OutboxStore.unwitnessedDisableCap` allows 10).
    package struct Candidates: Sendable, Equatable {
        package var tokens: [String]
        package var unwitnessedDisables: Int
    }

    /// nil when the database could not be asked (no verdict then, rather than a new deployment's).
    package func newest(excluding: [String], limit: Int = 3) async -> Candidates? {
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
    /// on the wire, so the suspects' own last pushes cannot hide the others); a backlog of PENDING rows is skipped.
    static func query(excluding: [String], limit: Int) -> PostgresQuery {
        """
        SELECT u.unwitnessed, t.token FROM (
            SELECT count(*) AS unwitnessed FROM "PushDeviceDisabled" WHERE NOT witnessed AND "restoredAt" IS NULL
        ) u LEFT JOIN (
            SELECT token, "sentAt" FROM (
                SELECT DISTINCT ON (d.token) d.token, s."sentAt" FROM (
                    SELECT pd."pushDeviceId", pd."sentAt" FROM "PushDelivery" pd
                    WHERE pd.status = \(literal: DeliveryStatus.sent) AND pd."sentAt" IS NOT NULL
                    ORDER BY pd."createdAt" DESC LIMIT 2000
                ) s JOIN "PushDevice" d ON d.id = s."pushDeviceId"
                WHERE d."isEnabled" AND d.token <> ALL(\(excluding)::text[])
                ORDER BY d.token, s."sentAt" DESC
            ) n ORDER BY "sentAt" DESC LIMIT \(limit)
        ) t ON true
        ORDER BY t."sentAt" DESC
        """
    }
}
