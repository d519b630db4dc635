import FoundationEssentials
import HTTP
import Lifecycle
import Logging
import Metrics
import Postgres
import Synchronization
import Timekeeping

/// Re-evaluates entitlements against the App Store Server API. Each row carries its own schedule in the
/// database; a pass takes the rows due soonest, per environment, and keeps going while rows are due, at the
/// environment's rate with lookups overlapping. Failures back off per row; a 429 pauses the environment. Revokes only
/// on verified evidence and restores this worker's own revocations when Apple reverses them. One instance at a time.
public final class EntitlementRechecker: Service {
    /// The environments Apple answers for, each with its own base URL, rate and pause.
    public static let environments = AppStoreEnvironment.allCases

    /// What one pass did.
    public struct PassSummary: Sendable, Equatable {
        public var ranPass = false
        /// Lookups answered (any answer, failures included).
        public var checked = 0
        public var revoked = 0
        public var restored = 0
        public var unchanged = 0
        public var failed = 0
        /// Set when Apple answered 429: that environment makes no request before this instant.
        public var rateLimitedUntil: Date?
    }

    /// One row's result inside a pass.
    enum Outcome: Sendable {
        case revoked, restored, unchanged, failed, released
        case rateLimited(Date?)
    }

    let dueGauge: Gauge
    let oldestGauge: Gauge
    private let gaugesRefreshedAt = Mutex<ContinuousClock.Instant?>(nil)
    /// What the sweep shares with the notification poller (which the daemon's wiring builds beside it).
    public let context: EntitlementContext

    /// The HTTP client settings a rechecker needs: enough transfers for every lane at full rate with up to two
    /// seconds of latency, plus the history poller.
    public static func httpConfiguration(for configuration: AppStoreConfiguration) -> HTTPClientConfiguration {
        var http = configuration.http
        http.maxInFlight = max(http.maxInFlight, environments.map { inFlightLimit(rate: configuration.rate($0)) }.reduce(2, +))
        return http
    }

    /// A sweep over `context` (built once by the wiring and shared with the notification poller).
    public init(context: EntitlementContext) {
        self.context = context
        dueGauge = context.metrics.gauge("entitlements_due", help: "Entitlements whose next App Store check is due now.")
        oldestGauge = context.metrics.gauge("entitlement_oldest_overdue_seconds",
                                    help: "How long the most overdue entitlement check has waited (0 when none is due).")
        for result in ["active", "revoked", "restored", "not_found", "invalid_transaction_id", "rate_limited", "unauthorized", "server_error",
                       "transport_error"] {
            count(result, increment: false)
        }
    }

    /// A sweep with a context of its own (see `EntitlementContext.init`).
    public convenience init(configuration: AppStoreConfiguration, database: PostgresClient, leaseConnection: PostgresClient, http: HTTPClient,
                            logger: Logger, metrics: MetricsRegistry, now: @escaping @Sendable () -> Date = Date.init,
                            onKeyStatus: @escaping @Sendable (String?) -> Void = { _ in }) {
        self.init(context: EntitlementContext(configuration: configuration, database: database, leaseConnection: leaseConnection, http: http,
                                              logger: logger, metrics: metrics, now: now, onKeyStatus: onKeyStatus))
    }

    /// Lookups a lane keeps in flight: its rate × 2 s, 2…256.
    static func inFlightLimit(rate: Double) -> Int { min(256, max(2, Int((rate * 2).rounded(.up)))) }

    func count(_ result: String, increment: Bool = true, by amount: Int = 1) {
        let counter = context.metrics.counter("entitlement_checks_total", help: "Entitlement re-checks by result (refusal reasons included).",
                                      labels: ["result": result])
        if increment {
            counter.increment(by: Double(amount))
            for _ in 0..<min(amount, RecentLookups.window) { context.recentLookups.record(result) }
        }
    }

    var backoffCap: Duration { context.configuration.failureBackoffCap ?? context.configuration.recheckInterval }

    /// One pass: every due row, environment by environment in parallel, until none is due or the task is cancelled
    /// (claimed rows not yet looked up are given back). Does nothing when another instance holds the `entitlements` lease.
    public func runOnce() async throws -> PassSummary {
        try await context.store.withSingletonLease("entitlements") { try await self.pass() } ?? PassSummary()
    }

    private func pass() async throws -> PassSummary {
        var summary = PassSummary(ranPass: true)
        let untrusted = try await context.store.failUntrustedEnvironments(base: context.configuration.failureBackoff, cap: backoffCap)
        if untrusted > 0 {
            count(SignedTransactionVerifier.Refusal.untrustedEnvironment.rawValue, by: untrusted)
            summary.failed += untrusted
            context.logger.warning("entitlements from an environment Apple does not sign (Xcode, LocalTesting); never trusted",
                           metadata: ["appstore.count": "\(untrusted)"])
        }
        let lanes = try await withThrowingTaskGroup(of: PassSummary.self) { group in
            for environment in Self.environments {
                group.addTask { try await self.sweep(environment) }
            }
            var all: [PassSummary] = []
            for try await lane in group { all.append(lane) }
            return all
        }
        for lane in lanes {
            summary.checked += lane.checked
            summary.revoked += lane.revoked
            summary.restored += lane.restored
            summary.unchanged += lane.unchanged
            summary.failed += lane.failed
            if let until = lane.rateLimitedUntil { summary.rateLimitedUntil = max(summary.rateLimitedUntil ?? until, until) }
        }
        await refreshGauges(force: true)
        return summary
    }

    /// One environment's lane: claim a batch, give each row a rate slot and an in-flight place, claim the next batch as
    /// soon as this one is dispatched; stop when nothing is due, on a pause (remaining rows given back) or on cancellation.
    private func sweep(_ environment: AppStoreEnvironment) async throws -> PassSummary {
        guard let pacer = context.pacers[environment] else { return PassSummary() }
        let batch = max(10, min(500, Int(pacer.rate * 2)))
        let limit = Self.inFlightLimit(rate: pacer.rate)
        var summary = PassSummary()
        try await withThrowingTaskGroup(of: Outcome.self) { group in
            var inFlight = 0
            func take(_ outcome: Outcome) {
                inFlight -= 1
                switch outcome {
                case .revoked: summary.checked += 1; summary.revoked += 1
                case .restored: summary.checked += 1; summary.restored += 1
                case .unchanged: summary.checked += 1; summary.unchanged += 1
                case .failed: summary.checked += 1; summary.failed += 1
                case .rateLimited(let until):
                    summary.checked += 1
                    summary.failed += 1
                    if let until { summary.rateLimitedUntil = max(summary.rateLimitedUntil ?? until, until) }
                case .released: break
                }
            }
            claiming: while !Task.isCancelled && !pacer.isPaused {
                let rows = try await context.store.claim(environment: environment.rawValue, limit: batch, lease: context.configuration.claimLease)
                await refreshGauges(force: false)
                if rows.isEmpty { break }
                for (index, row) in rows.enumerated() {
                    while inFlight >= limit, let outcome = try await group.next() { take(outcome) }
                    guard await pacer.acquire() else {
                        try await context.store.release(Array(rows[index...]))
                        break claiming
                    }
                    inFlight += 1
                    group.addTask { try await self.check(row, in: environment, pacer: pacer) }
                }
            }
            while let outcome = try await group.next() { take(outcome) }
        }
        if summary.rateLimitedUntil == nil, pacer.isPaused {
            summary.rateLimitedUntil = Date().addingTimeInterval(((pacer.pausedUntil ?? .now) - .now).asSeconds)
        }
        return summary
    }

    /// Looks one claimed row up, verifies the answer and records the outcome on the row.
    private func check(_ row: EntitlementStore.Claimed, in environment: AppStoreEnvironment, pacer: RatePacer) async throws -> Outcome {
        let metadata: LogMetadata = ["entitlement.id": row.id, "appstore.environment": row.environment]
        let answer = await context.client.transaction(id: row.transactionId, environment: environment)
        if Task.isCancelled {
            // Stopping: the answer may be a cancellation, not Apple's; the row is due again as it was.
            try await context.store.release([row])
            return .released
        }
        func fail(_ reason: String, notBefore: Date? = nil) async throws -> Outcome {
            count(reason)
            try await context.store.recordFailure(id: row.id, reason: reason, base: context.configuration.failureBackoff, cap: backoffCap, notBefore: notBefore)
            return .failed
        }
        switch answer {
        case .signedTransaction, .notFound, .invalidRequest, .rateLimited: context.keyFaults.accepted(environment)
        case .unauthorized, .serverError, .transportError: break
        }
        switch answer {
        case .signedTransaction(let jws):
            let expectation = SignedTransactionVerifier.Expectation(bundleId: context.configuration.bundleId, productId: row.productId,
                                                                    originalTransactionId: row.originalTransactionId, environment: row.environment)
            let verified: VerifiedTransaction
            do {
                verified = try context.verifier.verify(jws, expecting: expectation)
            } catch {
                context.logger.warning("signed transaction refused; entitlement unchanged",
                               metadata: metadata.merging(["appstore.refusal": error.rawValue]) { $1 })
                return try await fail(error.rawValue)
            }
            return try await apply(verified, to: row, metadata: metadata)
        case .notFound(let code):
            context.logger.warning("transaction not found at Apple; entitlement unchanged",
                           metadata: metadata.merging(["appstore.error_code": code.map(String.init) ?? "-"]) { $1 })
            return try await fail("not_found")
        case .invalidRequest(let code):
            // The row's transaction id, not Apple: a server error would send an operator to Apple's status page.
            context.logger.warning("App Store refused the row's transaction id as not valid; entitlement unchanged",
                           metadata: metadata.merging(["appstore.error_code": code.map(String.init) ?? "-"]) { $1 })
            return try await fail("invalid_transaction_id")
        case .rateLimited(let retryAt):
            pacer.pause(untilDate: retryAt)
            context.logger.notice("App Store rate limit; pausing this environment",
                          metadata: metadata.merging(["appstore.retry_at": retryAt.map { "\(Int64($0.timeIntervalSince1970 * 1000))" } ?? "-"]) { $1 })
            _ = try await fail("rate_limited", notBefore: retryAt)
            return .rateLimited(retryAt ?? Date().addingTimeInterval(60))
        case .unauthorized:
            // Our key, not the row: the environment pauses (with backoff) and the row goes back unchanged.
            count("unauthorized")
            pacer.pause(until: .now + context.keyFaults.refused(environment, during: "entitlement check"))
            try await context.store.release([row])
            return .released
        case .serverError(let status):
            context.logger.warning("App Store server error; entitlement unchanged", metadata: metadata.merging(["http.status": "\(status)"]) { $1 })
            return try await fail("server_error")
        case .transportError(let message):
            context.logger.warning("App Store unreachable; entitlement unchanged", metadata: metadata.merging(["error": message]) { $1 })
            return try await fail("transport_error")
        }
    }

    private func apply(_ verified: VerifiedTransaction, to row: EntitlementStore.Claimed, metadata: LogMetadata) async throws -> Outcome {
        let action = EntitlementDecision.decide(row.state, .lookup(revocation: verified.revocationDate, reason: verified.revocationReason,
                                                                                 kind: verified.revocationKind))
        if let write = action.write { try await context.store.record(write, id: row.id, interval: context.configuration.recheckInterval) }
        // The check's label says what Apple reported (a revocation re-recorded on a revoked row counts as `revoked`).
        switch action.write {
        case .revoke?: count("revoked")
        case .restore?: count("restored")
        case .stillActive?: count("active")
        case .revokeLater?, nil: count("unchanged")
        }
        switch action.verdict {
        case .revoked:
            context.revokedTotal.increment()
            context.logger.notice("entitlement revoked (verified refund or revocation)",
                          metadata: metadata.merging(NotificationHistoryPoller.revocationMetadata(verified)) { $1 })
            return .revoked
        case .restored:
            context.restoredTotal.increment()
            context.logger.notice("entitlement restored (Apple no longer reports a revocation)", metadata: metadata)
            return .restored
        case .active, .unchanged, .notRevoked, .stillRevoked:
            return .unchanged
        }
    }

    /// Refreshes the due-row gauges at most every 5 s (or now when `force`).
    func refreshGauges(force: Bool) async {
        let go = gaugesRefreshedAt.withLock { last -> Bool in
            if !force, let last, ContinuousClock.now - last < .seconds(5) { return false }
            last = .now
            return true
        }
        guard go, let gauges = try? await context.store.dueGauges() else { return }
        dueGauge.set(Double(gauges.due))
        oldestGauge.set(gauges.oldestOverdueSeconds)
    }

    /// How long to rest after a pass: until the next row falls due (or a pause ends), at most a minute, at least 100 ms.
    func restAfterPass() async -> Duration {
        let cadence = min(Duration.seconds(60), context.configuration.recheckInterval / 24)
        var rest = cadence
        for environment in Self.environments {
            guard let due = try? await context.store.nextDue(environment: environment.rawValue) else { continue }
            var wait = Duration.milliseconds(Int64(max(0, due.timeIntervalSinceNow) * 1000))
            if let paused = context.pacers[environment]?.pausedUntil { wait = max(wait, paused - .now) }
            rest = min(rest, wait)
        }
        return max(rest, .milliseconds(100))
    }

    /// Runs passes until `stop`: a stop cancels lookups in flight, rate waits and rests at once (rows claimed and
    /// not looked up are given back).
    public func run(until stop: StopSignal) async {
        await EntitlementSweep(rechecker: self).run(until: stop)
    }
}

/// The sweep as a periodic job: a pass over every due row, then a rest until the next row falls due.
struct EntitlementSweep: PeriodicJob {
    let rechecker: EntitlementRechecker

    var stopCancelsRound: Bool { true }

    func runOnce(until stop: StopSignal) async throws -> EntitlementRechecker.PassSummary {
        let summary = try await rechecker.runOnce()
        if summary.checked > 0 {
            rechecker.context.logger.info("entitlement pass", metadata: [
                "appstore.checked": "\(summary.checked)", "appstore.revoked": "\(summary.revoked)",
                "appstore.restored": "\(summary.restored)", "appstore.failed": "\(summary.failed)",
            ])
        }
        return summary
    }

    func rest(after round: EntitlementRechecker.PassSummary?) async -> Duration { await rechecker.restAfterPass() }

    func roundFailed(_ error: any Error) {
        rechecker.context.logger.warning("entitlement pass failed", metadata: ["error": "\(error)"])
    }
}
