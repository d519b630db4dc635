import FoundationEssentials
import Postgres
import Timekeeping

/// The rechecker's SQL: per-row schedule (`"nextCheckAt"`, `"checkFailures"`, `"lastCheckError"`, migration 4),
/// outcomes, the notification history checkpoint, and the singleton leases.
struct EntitlementStore: Sendable {
    /// A row taken by a claim; `previousDue` is its `"nextCheckAt"` before the claim (nil: never scheduled).
    struct Claimed: Sendable {
        var id: String
        var productId: String
        var originalTransactionId: String
        var transactionId: String
        var environment: String
        /// `status` and `"revokedAt"`, decoded once.
        var state: EntitlementDecision.State
        var previousDue: Date?
    }

    /// The row's state from its `status` and `"revokedAt"` cells; a status outside the contract is an error naming it.
    static func state(_ row: PostgresRow) throws -> EntitlementDecision.State {
        EntitlementDecision.State(status: try row["status"].string(), revokedAt: try row["revokedAt"].optionalDate())
    }

    /// What a verified answer does to a row.
    enum Verdict: Sendable, Equatable {
        case revoke(Date, reason: String?, kind: RevocationKind = RevocationKind())
        /// A later refund of a row already revoked: only its date moves forward.
        case revokeLater(Date, reason: String?, kind: RevocationKind = RevocationKind())
        /// Back to ACTIVE; with a date, only if the recorded refund is older than it (a reversal of that refund).
        case restore(reversedAt: Date? = nil)
        case stillActive
    }

    /// Rows the loop looks after: ACTIVE, and REVOKED ones this worker revoked (`"revokedAt"` set).
    static let eligible: PostgresQuery =
        #"(status = \#(literal: EntitlementStatus.active) OR (status = \#(literal: EntitlementStatus.revoked) AND "revokedAt" IS NOT NULL))"#
    /// When the row is due (never scheduled: first of all).
    static let due: PostgresQuery = #"COALESCE("nextCheckAt", '-infinity'::timestamptz)"#
    /// The schedule after a verified answer: failures reset, due again after about `interval` (less up to a tenth).
    static func scheduled(after interval: Duration) -> PostgresQuery {
        #""nextCheckAt" = now() + make_interval(secs => \#(interval.asSeconds) * (0.9 + 0.1 * random())), "checkFailures" = 0, "lastCheckError" = NULL"#
    }

    let database: PostgresClient
    let leaseConnection: PostgresClient

    /// Takes up to `limit` due rows of one environment, soonest due first, and moves them `lease` ahead so no
    /// other claim takes them while they are looked up.
    static func claimQuery(environment: String, limit: Int, lease: Duration) -> PostgresQuery {
        """
        WITH picked AS (
            SELECT id, "nextCheckAt" AS previous FROM "CaregiverEntitlement"
            WHERE \(sql: eligible) AND environment = \(environment) AND \(sql: due) <= now()
            ORDER BY \(sql: due), id
            LIMIT \(limit)
            FOR UPDATE SKIP LOCKED
        )
        UPDATE "CaregiverEntitlement" e SET "nextCheckAt" = now() + make_interval(secs => \(lease.asSeconds))
        FROM picked WHERE e.id = picked.id
        RETURNING e.id, e."productId", e."originalTransactionId", e."transactionId", e.environment, e.status, e."revokedAt",
                  picked.previous
        """
    }

    /// Claims due rows of one environment (`claimQuery`).
    func claim(environment: String, limit: Int, lease: Duration) async throws -> [Claimed] {
        let rows = try await database.query(Self.claimQuery(environment: environment, limit: limit, lease: lease))
        var claimed: [Claimed] = []
        claimed.reserveCapacity(rows.count)
        for row in rows {
            claimed.append(Claimed(id: try row["id"].string(), productId: try row["productId"].string(),
                                   originalTransactionId: try row["originalTransactionId"].string(),
                                   transactionId: try row["transactionId"].string(), environment: try row["environment"].string(),
                                   state: try Self.state(row), previousDue: try row["previous"].optionalDate()))
        }
        // RETURNING does not keep the CTE's order.
        return claimed.sorted { ($0.previousDue ?? .distantPast, $0.id) < ($1.previousDue ?? .distantPast, $1.id) }
    }

    /// Rows `ids[i]` due again at `dues[i]`.
    static func releaseQuery(ids: [String], dues: [Date]) -> PostgresQuery {
        """
        UPDATE "CaregiverEntitlement" e SET "nextCheckAt" = r.due
        FROM unnest(\(ids)::text[], \(dues)::timestamptz[]) AS r(id, due) WHERE e.id = r.id
        """
    }

    /// Gives claimed rows back untouched (a stop or a pause came first): due again as they were.
    func release(_ rows: [Claimed]) async throws {
        guard !rows.isEmpty else { return }
        // NULL (never scheduled) goes back as the epoch: still due, still first.
        try await database.query(Self.releaseQuery(ids: rows.map(\.id), dues: rows.map { $0.previousDue ?? Date(timeIntervalSince1970: 0) }))
    }

    /// The statement that writes `verdict` to row `id`, one per kind of verdict: revoke (an eligible row), revoke later
    /// (only the date of a revoked row moves forward), restore (a row this worker revoked, or only one revoked before
    /// `reversedAt`), still active. All but a later revocation reschedule the row (`scheduled(after:)`).
    static func recordQuery(_ verdict: Verdict, id: String, interval: Duration) -> PostgresQuery {
        let next = scheduled(after: interval)
        switch verdict {
        case .revoke(let date, let reason, let kind):
            return """
                UPDATE "CaregiverEntitlement"
                SET status = \(literal: EntitlementStatus.revoked), "revokedAt" = \(date), "revocationReason" = \(reason), "revocationType" = \(kind.type),
                    "revocationPercentage" = \(kind.percentage)::integer, "lastCheckedAt" = now(), "updatedAt" = now(), \(sql: next)
                WHERE id = \(id) AND \(sql: eligible)
                """
        case .revokeLater(let date, let reason, let kind):
            return """
                UPDATE "CaregiverEntitlement" SET "revokedAt" = \(date), "revocationReason" = \(reason), "revocationType" = \(kind.type),
                    "revocationPercentage" = \(kind.percentage)::integer, "updatedAt" = now()
                WHERE id = \(id) AND status = \(literal: EntitlementStatus.revoked) AND "revokedAt" < \(date)
                """
        case .restore(let reversedAt):
            return """
                UPDATE "CaregiverEntitlement"
                SET status = \(literal: EntitlementStatus.active), "revokedAt" = NULL, "revocationReason" = NULL, "revocationType" = NULL, "revocationPercentage" = NULL, "lastCheckedAt" = now(), "updatedAt" = now(), \(sql: next)
                WHERE id = \(id) AND status = \(literal: EntitlementStatus.revoked) AND "revokedAt" IS NOT NULL AND (\(reversedAt)::timestamptz IS NULL OR "revokedAt" < \(reversedAt))
                """
        case .stillActive:
            return """
                UPDATE "CaregiverEntitlement" SET "lastCheckedAt" = now(), "updatedAt" = now(), \(sql: next) WHERE id = \(id) AND status = \(literal: EntitlementStatus.active)
                """
        }
    }

    /// Records a verified answer: the row's failures reset and it is due again after about the interval (less up to a tenth).
    func record(_ verdict: Verdict, id: String, interval: Duration) async throws {
        try await database.query(Self.recordQuery(verdict, id: id, interval: interval))
    }

    /// A failed lookup: the row waits `base` × 2^(failures so far), at most `cap`, and never before `notBefore`.
    /// `"lastCheckedAt"` does not move (nothing was learnt); the reason is kept.
    func recordFailure(id: String, reason: String, base: Duration, cap: Duration, notBefore: Date? = nil) async throws {
        try await database.query(Self.failureQuery(reason: reason, base: base, cap: cap, notBefore: notBefore, where: "id = \(id)"))
    }

    /// The rows matching `condition` back off after a failed lookup (see `recordFailure`).
    static func failureQuery(reason: String, base: Duration, cap: Duration, notBefore: Date?, where condition: PostgresQuery) -> PostgresQuery {
        """
        UPDATE "CaregiverEntitlement"
        SET "checkFailures" = "checkFailures" + 1, "lastCheckError" = \(reason),
            "nextCheckAt" = GREATEST(COALESCE(\(notBefore)::timestamptz, '-infinity'::timestamptz),
                now() + make_interval(secs => LEAST(\(cap.asSeconds), \(base.asSeconds) * power(2, LEAST("checkFailures", 40)))))
        WHERE \(sql: condition)
        """
    }

    /// Due rows of environments Apple does not sign, backed off as refused; returns their ids.
    static func failUntrustedEnvironmentsQuery(base: Duration, cap: Duration) -> PostgresQuery {
        let condition: PostgresQuery = "\(sql: eligible) AND environment NOT IN ('Production', 'Sandbox') AND \(sql: due) <= now()"
        let failure = failureQuery(reason: SignedTransactionVerifier.Refusal.untrustedEnvironment.rawValue, base: base, cap: cap,
                                   notBefore: nil, where: condition)
        return "\(sql: failure) RETURNING id"
    }

    /// Due rows of environments Apple does not sign (Xcode, LocalTesting, anything else): refused without a request, backed off.
    func failUntrustedEnvironments(base: Duration, cap: Duration) async throws -> Int {
        try await database.query(Self.failUntrustedEnvironmentsQuery(base: base, cap: cap)).count
    }

    /// The soonest due time of the environment's rows (`due`), and whether one was never scheduled (`unscheduled`).
    static func nextDueQuery(environment: String) -> PostgresQuery {
        """
        SELECT min(\(sql: due)) = '-infinity'::timestamptz AS unscheduled, min(\(sql: due)) AS due
        FROM "CaregiverEntitlement" WHERE \(sql: eligible) AND environment = \(environment)
        """
    }

    /// When the environment's next row falls due (distantPast: one is due now), nil when it has none.
    func nextDue(environment: String) async throws -> Date? {
        let rows = try await database.query(Self.nextDueQuery(environment: environment))
        guard let row = rows.first, row["due"].optionalString() != nil else { return nil }
        return try row["unscheduled"].bool() ? .distantPast : try row["due"].date()
    }

    /// Rows due now (`due`) and the seconds the most overdue one has waited (`oldest`).
    static let dueGaugesQuery: PostgresQuery = """
        SELECT count(*) AS due, COALESCE(extract(epoch FROM now() - min(COALESCE("nextCheckAt", "createdAt"))), 0)::double precision AS oldest
        FROM "CaregiverEntitlement" WHERE \(sql: eligible) AND \(sql: due) <= now()
        """

    /// Rows due now and how long the most overdue one has waited (a never-checked row: since it was created).
    func dueGauges() async throws -> (due: Int, oldestOverdueSeconds: Double) {
        let row = try await database.query(Self.dueGaugesQuery)[0]
        return (try row["due"].int(), max(0, try row["oldest"].double()))
    }

    /// The row of Apple's original transaction id.
    static func rowQuery(originalTransactionId: String) -> PostgresQuery {
        """
        SELECT id, "productId", "originalTransactionId", "transactionId", environment, status, "revokedAt"
        FROM "CaregiverEntitlement" WHERE "originalTransactionId" = \(originalTransactionId)
        """
    }

    /// The row a notification is about, by Apple's original transaction id.
    func row(originalTransactionId: String) async throws -> Claimed? {
        let rows = try await database.query(Self.rowQuery(originalTransactionId: originalTransactionId))
        guard let row = rows.first else { return nil }
        // A REVOKED row without "revokedAt" belongs to someone else: its state says so, and nothing touches it.
        return Claimed(id: try row["id"].string(), productId: try row["productId"].string(),
                       originalTransactionId: try row["originalTransactionId"].string(), transactionId: try row["transactionId"].string(),
                       environment: try row["environment"].string(), state: try Self.state(row), previousDue: nil)
    }

    /// Where a notification query resumes: its window and, mid-way, the next page's token.
    struct Checkpoint: Sendable, Equatable {
        var start: Date
        var end: Date?
        var paginationToken: String?
    }

    /// The stored checkpoint of one environment's notification query.
    static func checkpointQuery(environment: String, type: String) -> PostgresQuery {
        """
        SELECT "startDate", "endDate", "paginationToken" FROM "AppStoreNotificationCheckpoint"
        WHERE environment = \(environment) AND "notificationType" = \(type)
        """
    }

    /// Where the environment's notification query of `type` resumes, nil when it never ran.
    func checkpoint(environment: String, type: String) async throws -> Checkpoint? {
        let rows = try await database.query(Self.checkpointQuery(environment: environment, type: type))
        guard let row = rows.first else { return nil }
        return Checkpoint(start: try row["startDate"].date(), end: try row["endDate"].optionalDate(),
                          paginationToken: row["paginationToken"].optionalString())
    }

    /// Stores (or replaces) the checkpoint of one environment's notification query.
    static func saveQuery(_ checkpoint: Checkpoint, environment: String, type: String) -> PostgresQuery {
        """
        INSERT INTO "AppStoreNotificationCheckpoint" (environment, "notificationType", "startDate", "endDate", "paginationToken", "updatedAt")
        VALUES (\(environment), \(type), \(checkpoint.start), \(checkpoint.end), \(checkpoint.paginationToken), now())
        ON CONFLICT (environment, "notificationType") DO UPDATE
        SET "startDate" = excluded."startDate", "endDate" = excluded."endDate", "paginationToken" = excluded."paginationToken", "updatedAt" = now()
        """
    }

    /// Saves where the environment's notification query of `type` resumes.
    func save(_ checkpoint: Checkpoint, environment: String, type: String) async throws {
        try await database.query(Self.saveQuery(checkpoint, environment: environment, type: type))
    }

    /// Runs `body` only while this process holds the named lease row (`SingletonLease.whileHeld`, on the lease
    /// connection so a busy pass never delays a renewal); nil when another instance holds it.
    func withSingletonLease<T: Sendable>(_ name: String, duration: Duration = .seconds(60),
                                         _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        try await SingletonLease(name: name, duration: duration).whileHeld(on: leaseConnection, body)
    }
}

extension EntitlementStatus: PostgresLiteral {}
