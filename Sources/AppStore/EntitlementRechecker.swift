import Foundation
import HTTP
import Logging
import Metrics
import Postgres

/// Re-evaluates entitlements against the App Store Server API (SPEC §4): one instance at a
/// time (advisory lock), rate-bounded, revoking only on verified evidence and restoring this
/// worker's own revocations when Apple reverses them.
public final class EntitlementRechecker: Sendable {
    /// Advisory lock key ("medwent1").
    public static let lockKey: Int64 = 0x6D65_6477_656E_7431

    /// What one pass did.
    public struct PassSummary: Sendable, Equatable {
        public var ranPass = false
        public var checked = 0
        public var revoked = 0
        public var restored = 0
        public var unchanged = 0
        public var failed = 0
        /// Set when Apple answered 429: no request before this instant.
        public var rateLimitedUntil: Date?
    }

    static let dueSQL = """
        SELECT id, "productId", "originalTransactionId", "transactionId", environment, status
        FROM "CaregiverEntitlement"
        WHERE (status = 'ACTIVE' OR (status = 'REVOKED' AND "revokedAt" IS NOT NULL))
          AND ("lastCheckedAt" IS NULL OR "lastCheckedAt" < now() - make_interval(secs => $1::double precision))
        ORDER BY "lastCheckedAt" NULLS FIRST, id
        LIMIT $2
        """

    static let revokeSQL = """
        UPDATE "CaregiverEntitlement"
        SET status = 'REVOKED', "revokedAt" = $2::timestamptz, "revocationReason" = $3, "lastCheckedAt" = now(), "updatedAt" = now()
        WHERE id = $1 AND (status = 'ACTIVE' OR (status = 'REVOKED' AND "revokedAt" IS NOT NULL))
        """

    static let restoreSQL = """
        UPDATE "CaregiverEntitlement"
        SET status = 'ACTIVE', "revokedAt" = NULL, "revocationReason" = NULL, "lastCheckedAt" = now(), "updatedAt" = now()
        WHERE id = $1 AND status = 'REVOKED' AND "revokedAt" IS NOT NULL
        """

    static let touchSQL = """
        UPDATE "CaregiverEntitlement" SET "lastCheckedAt" = now(), "updatedAt" = now() WHERE id = $1 AND status = 'ACTIVE'
        """

    let configuration: AppStoreConfiguration
    let client: AppStoreClient
    let verifier: SignedTransactionVerifier
    let database: PostgresClient
    let lockConnection: PostgresClient
    let logger: Logger
    let metrics: MetricsRegistry
    let revokedTotal: Counter
    let restoredTotal: Counter
    /// Rows whose last check failed, and when: skipped for a quarter interval so a bad row is not hammered.
    private let failures = FailureMemory()

    public init(configuration: AppStoreConfiguration, conninfo: String, logger: Logger, metrics: MetricsRegistry,
                now: @escaping @Sendable () -> Date = Date.init) throws(HTTPError) {
        self.configuration = configuration
        client = AppStoreClient(configuration: configuration, http: try HTTPClient(configuration: configuration.http), now: now)
        verifier = SignedTransactionVerifier(roots: configuration.roots)
        database = PostgresClient(conninfo: conninfo, maxConnections: 1)
        lockConnection = PostgresClient(conninfo: conninfo, maxConnections: 1)
        self.logger = logger
        self.metrics = metrics
        revokedTotal = metrics.counter("entitlements_revoked_total", help: "Entitlements revoked after a verified refund or revocation.")
        restoredTotal = metrics.counter("entitlements_restored_total", help: "Entitlements this worker revoked and restored after Apple reversed it.")
        for result in ["active", "revoked", "restored", "not_found", "rate_limited", "server_error", "transport_error"] { count(result, increment: false) }
    }

    private func count(_ result: String, increment: Bool = true) {
        let counter = metrics.counter("entitlement_checks_total", help: "Entitlement re-checks by result (refusal reasons included).",
                                      labels: ["result": result])
        if increment { counter.increment() }
    }

    /// One pass over the due rows (up to `limit`); skipped when another instance holds the lock.
    public func runOnce(limit: Int = 500, shouldStop: @escaping @Sendable () -> Bool = { false }) async throws -> PassSummary {
        var summary = PassSummary()
        let locked = try await lockConnection.withConnection { connection in
            try connection.query("SELECT pg_try_advisory_lock($1) AS ok", [.int(Self.lockKey)])[0]["ok"].bool()
        }
        guard locked else { return summary }
        summary.ranPass = true
        do {
            try await pass(limit: limit, shouldStop: shouldStop, summary: &summary)
        } catch {
            _ = try? await lockConnection.query("SELECT pg_advisory_unlock($1)", [.int(Self.lockKey)])
            throw error
        }
        _ = try? await lockConnection.query("SELECT pg_advisory_unlock($1)", [.int(Self.lockKey)])
        return summary
    }

    private func pass(limit: Int, shouldStop: @Sendable () -> Bool, summary: inout PassSummary) async throws {
        let rows = try await database.query(Self.dueSQL, [.double(configuration.recheckInterval.asSeconds), .int(limit)])
        var lastRequest: [String: ContinuousClock.Instant] = [:]
        for row in rows {
            if shouldStop() { break }
            let id = try row["id"].string()
            let environment = try row["environment"].string()
            if failures.recentlyFailed(id, within: configuration.recheckInterval / 4) { continue }
            guard environment == "Production" || environment == "Sandbox" else {
                // Xcode / LocalTesting purchases: Apple does not sign them; nothing to trust.
                count(SignedTransactionVerifier.Refusal.untrustedEnvironment.rawValue)
                failures.record(id)
                summary.failed += 1
                continue
            }
            // Rate bound per environment.
            let spacing = Duration.seconds(1 / (environment == "Sandbox" ? configuration.sandboxRate : configuration.productionRate))
            if let last = lastRequest[environment] {
                let wait = spacing - (ContinuousClock.now - last)
                if wait > .zero { try? await Task.sleep(for: wait) }
            }
            lastRequest[environment] = .now
            summary.checked += 1
            let metadata: LogMetadata = ["entitlement.id": id, "appstore.environment": environment]
            switch await client.transaction(id: try row["transactionId"].string(), environment: environment) {
            case .signedTransaction(let jws):
                let expectation = SignedTransactionVerifier.Expectation(
                    bundleId: configuration.bundleId, productId: try row["productId"].string(),
                    originalTransactionId: try row["originalTransactionId"].string(), environment: environment)
                let verified: VerifiedTransaction
                do {
                    verified = try verifier.verify(jws, expecting: expectation)
                } catch {
                    count(error.rawValue)
                    failures.record(id)
                    summary.failed += 1
                    logger.warning("signed transaction refused; entitlement unchanged",
                                   metadata: metadata.merging(["appstore.refusal": error.rawValue]) { $1 })
                    continue
                }
                try await apply(verified, id: id, status: try row["status"].string(), summary: &summary, metadata: metadata)
            case .notFound(let code):
                count("not_found")
                failures.record(id)
                summary.failed += 1
                logger.warning("transaction not found at Apple; entitlement unchanged",
                               metadata: metadata.merging(["appstore.error_code": code.map(String.init) ?? "-"]) { $1 })
            case .rateLimited(let retryAt):
                count("rate_limited")
                summary.rateLimitedUntil = retryAt ?? Date().addingTimeInterval(60)
                logger.notice("App Store rate limit; pausing re-checks",
                              metadata: ["appstore.retry_at": "\(summary.rateLimitedUntil!.timeIntervalSince1970)"])
                return
            case .unauthorized:
                count("unauthorized")
                logger.error("App Store Server API refused our JWT (check APPSTORE_ISSUER_ID, APPSTORE_KEY_ID, the key)", metadata: metadata)
                return
            case .serverError(let status):
                count("server_error")
                failures.record(id)
                summary.failed += 1
                logger.warning("App Store server error; entitlement unchanged", metadata: metadata.merging(["http.status": "\(status)"]) { $1 })
            case .transportError(let message):
                count("transport_error")
                failures.record(id)
                summary.failed += 1
                logger.warning("App Store unreachable; entitlement unchanged", metadata: metadata.merging(["error": message]) { $1 })
            }
        }
    }

    private func apply(_ verified: VerifiedTransaction, id: String, status: String, summary: inout PassSummary, metadata: LogMetadata) async throws {
        if let revocation = verified.revocationDate {
            try await database.query(Self.revokeSQL, [.text(id), .timestamp(revocation), .optional(verified.revocationReason.map(String.init))])
            count("revoked")
            if status == "ACTIVE" {
                revokedTotal.increment()
                summary.revoked += 1
                logger.notice("entitlement revoked (verified refund or revocation)",
                              metadata: metadata.merging(["appstore.revocation_reason": verified.revocationReason.map(String.init) ?? "-"]) { $1 })
            } else {
                summary.unchanged += 1
            }
        } else if status == "REVOKED" {
            try await database.query(Self.restoreSQL, [.text(id)])
            count("restored")
            restoredTotal.increment()
            summary.restored += 1
            logger.notice("entitlement restored (Apple no longer reports a revocation)", metadata: metadata)
        } else {
            try await database.query(Self.touchSQL, [.text(id)])
            count("active")
            summary.unchanged += 1
        }
    }

    /// Runs passes spread over the interval (every interval/24, at least every 5 minutes) until `stop`.
    public func run(isStopped: @escaping @Sendable () -> Bool, sleep: @escaping @Sendable (Duration) async -> Void) async {
        let cadence = min(Duration.seconds(300), configuration.recheckInterval / 24)
        while !isStopped() {
            var pause = cadence
            do {
                let summary = try await runOnce(shouldStop: isStopped)
                if let until = summary.rateLimitedUntil {
                    pause = max(pause, .milliseconds(Int64(max(0, until.timeIntervalSinceNow) * 1000)))
                }
                if summary.checked > 0 {
                    logger.info("entitlement pass", metadata: ["appstore.checked": "\(summary.checked)", "appstore.revoked": "\(summary.revoked)",
                                                               "appstore.restored": "\(summary.restored)", "appstore.failed": "\(summary.failed)"])
                }
            } catch {
                logger.warning("entitlement pass failed", metadata: ["error": "\(error)"])
            }
            await sleep(pause)
        }
    }
}

/// Remembers recent per-row failures (in memory; a restart simply retries them).
final class FailureMemory: @unchecked Sendable {
    private let lock = NSLock()
    private var failedAt: [String: ContinuousClock.Instant] = [:]

    func record(_ id: String) { lock.withLock { failedAt[id] = .now } }

    func recentlyFailed(_ id: String, within window: Duration) -> Bool {
        lock.withLock {
            guard let at = failedAt[id] else { return false }
            return ContinuousClock.now - at < window
        }
    }
}

extension Duration {
    var asSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
