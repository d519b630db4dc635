import Postgres

/// The tokens a disabling answer's dry run goes to (SPEC §3, "a disable needs a witness"): devices that received a push
/// lately, newest first, still enabled. FCM accepted them with this project's key, so FCM refusing one of them too says
/// the project (the key, the URL, a proxy) is at fault, not the token.
package struct KnownGoodTokens: Sendable {
    let client: PostgresClient

    package init(client: PostgresClient) {
        self.client = client
    }

    /// At most `limit` distinct tokens other than `excluding` (the suspects), from the newest SENT deliveries this
    /// worker recorded (`"sentAt"` set; the API's inline-sender rows carry none); empty when no such token ever
    /// received a push; nil when the database could not be asked (no verdict then, rather than a new deployment's).
    package func newest(excluding: [String], limit: Int = 3) async -> [String]? {
        do {
            return try await client.query(Self.query(excluding: excluding, limit: limit)).map { try $0["token"].string() }
        } catch {
            return nil
        }
    }

    /// Walks `"PushDelivery_createdAt_idx"` backwards over the newest 2,000 SENT rows (more than every instance's
    /// sends on the wire, so the suspects' own last pushes cannot hide the others); a backlog of PENDING rows is skipped.
    static func query(excluding: [String], limit: Int) -> PostgresQuery {
        """
        SELECT token FROM (
            SELECT DISTINCT ON (d.token) d.token, s."sentAt" FROM (
                SELECT pd."pushDeviceId", pd."sentAt" FROM "PushDelivery" pd
                WHERE pd.status = 'SENT' AND pd."sentAt" IS NOT NULL
                ORDER BY pd."createdAt" DESC LIMIT 2000
            ) s JOIN "PushDevice" d ON d.id = s."pushDeviceId"
            WHERE d."isEnabled" AND d.token <> ALL(\(excluding)::text[])
            ORDER BY d.token, s."sentAt" DESC
        ) t ORDER BY "sentAt" DESC LIMIT \(limit)
        """
    }
}
