import FoundationEssentials
import Lifecycle
import Logging
import Metrics
import Timekeeping

/// Finds refunds in minutes: every poll interval, pages through Get Notification History for REFUND, REVOKE (Family
/// Sharing access ended) and REFUND_REVERSED in each environment from a checkpoint kept in the database, verifies each notification and the
/// transaction inside it as a lookup would, and revokes or restores the row. The sweep stays the safety net.
public final class NotificationHistoryPoller: PeriodicJob {
    /// One query per type (Apple filters on one notificationType at a time).
    public static let types = ["REFUND", "REVOKE", "REFUND_REVERSED"]
    /// The types whose verified transaction revokes (`revocationDate` set); the others restore.
    static let revoking: Set<String> = ["REFUND", "REVOKE"]
    /// Each window starts this long before the previous one ended: a notification Apple records late is still seen
    /// (applying one twice changes nothing).
    static let overlap: TimeInterval = 300
    /// Apple's pagination token errors (invalid, expired): the window is read again from its start.
    static let tokenErrors: Set<Int> = [4_000_014, 4_000_017]

    /// What one poll did.
    public struct PollSummary: Sendable, Equatable {
        public var pages = 0
        public var notifications = 0
        /// Verdict → count (`revoked`, `restored`, `unchanged`, `no_entitlement`, refusal reasons, ...).
        public var verdicts: [String: Int] = [:]
    }

    /// What the poller shares with the entitlement sweep.
    let context: EntitlementContext

    /// The poller over the context the sweep also uses (nil when `notificationHistory` is off).
    public init?(context: EntitlementContext) {
        guard context.configuration.notificationHistory else { return nil }
        self.context = context
        for type in Self.types {
            for verdict in ["revoked", "restored", "unchanged"] { count(type, verdict, increment: false) }
        }
    }

    /// How far back Apple keeps history: 180 days in production, 30 in sandbox (an hour's margin kept).
    static func retention(_ environment: AppStoreEnvironment) -> TimeInterval { (environment == .sandbox ? 30 : 180) * 86_400 - 3600 }

    func count(_ type: String, _ verdict: String, increment: Bool = true) {
        let counter = context.metrics.counter("appstore_notifications_total", help: "App Store notifications read from the history, by type and verdict.",
                                      labels: ["type": type, "verdict": verdict])
        if increment { counter.increment() }
    }

    /// Polls every environment and type once; nothing when another instance holds the poller's lease.
    ///
    /// In each environment the types are read in `types`' order up to one instant, and a type whose window is not read
    /// to its end (Apple's 5xx, a timeout, a rate limit) ends that environment's round: REFUND_REVERSED is never read
    /// past what REFUND has been read to. Otherwise a reversal read while its refund's query failed found the row still
    /// active and was passed by, and the refund read in the next round revoked the row for good (until the sweep).
    public func pollOnce() async throws -> PollSummary {
        try await context.store.withSingletonLease("appstore-notifications") {
            var summary = PollSummary()
            for environment in EntitlementRechecker.environments {
                let instant = self.context.now()
                for type in Self.types where !Task.isCancelled {
                    guard try await self.poll(environment: environment, type: type, until: instant, summary: &summary) else { break }
                }
            }
            return summary
        } ?? PollSummary()
    }

    // A periodic job: a poll every `notificationPollInterval` until stop, which cancels a poll in progress.
    public var stopCancelsRound: Bool { true }
    public func runOnce(until stop: StopSignal) async throws -> PollSummary {
        let summary = try await pollOnce()
        if summary.notifications > 0 {
            context.logger.info("notification history read", metadata: [
                "appstore.notifications": "\(summary.notifications)",
                "appstore.verdicts": summary.verdicts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","),
            ])
        }
        return summary
    }
    public func rest(after round: PollSummary?) async -> Duration { context.configuration.notificationPollInterval }
    public func roundFailed(_ error: any Error) { context.logger.warning("notification history poll failed", metadata: ["error": "\(error)"]) }

    /// Reads one type's window up to `instant` (or the end of a window cut short earlier); true when it was read to its
    /// end, false when it is left for a later round.
    private func poll(environment: AppStoreEnvironment, type: String, until instant: Date, summary: inout PollSummary) async throws -> Bool {
        guard let pacer = context.pacers[environment] else { return false }
        let earliest = instant.addingTimeInterval(-Self.retention(environment))
        var checkpoint = try await context.store.checkpoint(environment: environment.rawValue, type: type)
            ?? .init(start: instant.addingTimeInterval(-min(context.configuration.recheckInterval.asSeconds, Self.retention(environment))))
        if checkpoint.start < earliest {
            // Down longer than Apple keeps history: the sweep covers what is older.
            checkpoint = .init(start: earliest)
        }
        // A window cut short (stop, crash, error mid-way) resumes with its own end and token; a new one ends now.
        let end = checkpoint.end ?? instant
        var token = checkpoint.paginationToken
        let metadata: LogMetadata = ["appstore.environment": environment.rawValue, "appstore.notification_type": type]
        while !Task.isCancelled {
            guard await pacer.acquire() else { return false }
            switch await context.client.notificationHistory(environment: environment, type: type, start: checkpoint.start, end: end,
                                                    paginationToken: token) {
            case .page(let page):
                context.keyFaults.accepted(environment)
                summary.pages += 1
                for signedPayload in page.signedPayloads {
                    let verdict = try await apply(signedPayload, type: type, environment: environment.rawValue)
                    summary.notifications += 1
                    summary.verdicts[verdict, default: 0] += 1
                    count(type, verdict)
                }
                if page.hasMore, let next = page.paginationToken {
                    token = next
                    try await context.store.save(.init(start: checkpoint.start, end: end, paginationToken: next), environment: environment.rawValue, type: type)
                } else {
                    let nextStart = max(checkpoint.start, end.addingTimeInterval(-Self.overlap))
                    try await context.store.save(.init(start: nextStart), environment: environment.rawValue, type: type)
                    return true
                }
            case .badRequest(let code?) where Self.tokenErrors.contains(code) && token != nil:
                context.logger.notice("notification history token refused; reading the window again", metadata: metadata)
                token = nil
                try await context.store.save(.init(start: checkpoint.start, end: end), environment: environment.rawValue, type: type)
            case .badRequest(let code):
                context.logger.error("notification history request refused", metadata: metadata.merging(["appstore.error_code": code.map(String.init) ?? "-"]) { $1 })
                return false
            case .rateLimited(let retryAt):
                pacer.pause(untilDate: retryAt)
                context.logger.notice("App Store rate limit on notification history; pausing this environment", metadata: metadata)
                return false
            case .unauthorized:
                pacer.pause(until: .now + context.keyFaults.refused(environment, during: "notification history"))
                return false
            case .serverError(let status):
                context.logger.warning("notification history: App Store server error", metadata: metadata.merging(["http.status": "\(status)"]) { $1 })
                return false
            case .transportError(let message):
                if !Task.isCancelled {
                    context.logger.warning("notification history: App Store unreachable", metadata: metadata.merging(["error": message]) { $1 })
                }
                return false
            }
        }
        return false
    }

    /// Apple's reason, type and percentage of a revocation as log fields.
    static func revocationMetadata(_ verified: VerifiedTransaction) -> LogMetadata {
        ["appstore.revocation_reason": verified.revocationReason.map(String.init) ?? "-",
         "appstore.revocation_type": verified.revocationKind.type ?? "-",
         "appstore.revocation_percentage": verified.revocationKind.percentage.map(String.init) ?? "-"]
    }

    /// Verifies one notification and applies it; returns the verdict (metric label).
    func apply(_ signedPayload: String, type: String, environment: String) async throws -> String {
        let notification: VerifiedNotification
        do {
            notification = try context.verifier.verifyNotification(signedPayload, type: type, bundleId: context.configuration.bundleId, environment: environment)
        } catch {
            context.logger.warning("notification refused; nothing changed", metadata: ["appstore.refusal": error.rawValue, "appstore.notification_type": type])
            return error.rawValue
        }
        guard let original = SignedTransactionVerifier.claimedOriginalTransactionId(notification.signedTransactionInfo) else {
            return SignedTransactionVerifier.Refusal.malformedPayload.rawValue
        }
        guard let row = try await context.store.row(originalTransactionId: original) else { return "no_entitlement" }
        let metadata: LogMetadata = ["entitlement.id": row.id, "appstore.environment": environment, "appstore.notification_type": type]
        // Someone else's revocation: decided before the transaction is even verified (nothing will be written).
        guard !row.state.isOthers else { return EntitlementDecision.Verdict.unchanged.rawValue }
        let verified: VerifiedTransaction
        do {
            verified = try context.verifier.verify(notification.signedTransactionInfo, expecting: .init(
                bundleId: context.configuration.bundleId, productId: row.productId, originalTransactionId: row.originalTransactionId,
                environment: row.environment))
        } catch {
            context.logger.warning("notification's transaction refused; entitlement unchanged", metadata: metadata.merging(["appstore.refusal": error.rawValue]) { $1 })
            return error.rawValue
        }
        let evidence: EntitlementDecision.Evidence = Self.revoking.contains(type)
            ? .refund(revocation: verified.revocationDate, reason: verified.revocationReason, kind: verified.revocationKind)
            : .reversal(signedAt: notification.signedDate, revocation: verified.revocationDate)
        let action = EntitlementDecision.decide(row.state, evidence)
        if let write = action.write { try await context.store.record(write, id: row.id, interval: context.configuration.recheckInterval) }
        switch action.verdict {
        case .revoked:
            context.revokedTotal.increment()
            context.logger.notice("entitlement revoked (verified \(type) notification)",
                          metadata: metadata.merging(Self.revocationMetadata(verified)) { $1 })
        case .restored:
            context.restoredTotal.increment()
            context.logger.notice("entitlement restored (verified REFUND_REVERSED notification)", metadata: metadata)
        case .active, .unchanged, .notRevoked, .stillRevoked:
            break
        }
        return action.verdict.rawValue
    }
}
