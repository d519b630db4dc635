import FoundationEssentials

/// The one rule for what verified evidence from Apple does to an entitlement row: revoking or restoring a paid
/// entitlement is the riskiest write this daemon makes, and the sweep (a transaction looked up by id) and the
/// notification poller (REFUND / REFUND_REVERSED from the notification history) both decide through `decide`. Pure:
/// no database, no clock; the caller writes `Action.write` (itself guarded in SQL by the row's state) and reports
/// `Action.verdict`.
enum EntitlementDecision {
    /// The row as read, decoded once from `status` and `"revokedAt"`.
    enum State: Equatable, Sendable {
        case active
        /// REVOKED by this worker: `"revokedAt"` holds when the refund took effect.
        case revoked(at: Date)
        /// REVOKED without `"revokedAt"`: revoked by someone else (the API, support). The worker never touches it.
        case revokedElsewhere
        /// A status the contract does not name (the API's own, added later): never touched either.
        case other(String)

        /// From the row's `status` and `"revokedAt"`.
        init(status: String, revokedAt: Date?) {
            switch (EntitlementStatus(rawValue: status), revokedAt) {
            case (.active?, _): self = .active
            case (.revoked?, let at?): self = .revoked(at: at)
            case (.revoked?, nil): self = .revokedElsewhere
            case (nil, _): self = .other(status)
            }
        }

        /// Rows the worker never writes.
        var isOthers: Bool {
            switch self {
            case .revokedElsewhere, .other: true
            case .active, .revoked: false
            }
        }
    }

    /// What was verified (signature, chain, bundle, product, original transaction, environment all checked).
    enum Evidence: Equatable, Sendable {
        /// The sweep: the transaction Apple returns now; `revocation` when Apple reports it refunded or revoked.
        case lookup(revocation: Date?, reason: Int?, kind: RevocationKind = RevocationKind())
        /// A REFUND or REVOKE (Family Sharing ended) notification; `revocation` from its verified transaction (nil: the
        /// transaction says it stands). Every `revocationType` revokes: Apple sets `revocationDate` only on a transaction
        /// it took back, whether refunded in full, in part, or no longer shared.
        case refund(revocation: Date?, reason: Int?, kind: RevocationKind = RevocationKind())
        /// A REFUND_REVERSED notification signed at `signedAt`; `revocation` when its transaction still reports one.
        case reversal(signedAt: Date, revocation: Date?)
    }

    /// What happened, for logs and the verdict metric labels.
    enum Verdict: String, Equatable, Sendable {
        case revoked, restored
        /// Looked up and still active (the sweep's `active`).
        case active
        /// Nothing to change (already in that state, an older or duplicate notification, someone else's revocation).
        case unchanged
        /// A REFUND notification whose transaction Apple still reports as standing: never revoked on its word alone.
        case notRevoked = "not_revoked"
        /// A reversal whose transaction is still revoked.
        case stillRevoked = "still_revoked"
    }

    struct Action: Equatable, Sendable {
        /// What to write; nil: nothing.
        var write: EntitlementStore.Verdict?
        var verdict: Verdict
    }

    static func decide(_ state: State, _ evidence: Evidence) -> Action {
        if state.isOthers { return Action(write: nil, verdict: .unchanged) }
        switch evidence {
        case .lookup(let revocation?, let reason, let kind):
            // Revoked at Apple: (re)recorded with Apple's date; a change only for an ACTIVE row.
            return Action(write: .revoke(revocation, reason: reason.map(String.init), kind: kind), verdict: state == .active ? .revoked : .unchanged)
        case .lookup(nil, _, _):
            // Apple no longer reports a revocation: a row this worker revoked comes back; an active one stays.
            if case .revoked = state { return Action(write: .restore(), verdict: .restored) }
            return Action(write: .stillActive, verdict: .active)
        case .refund(let revocation?, let reason, let kind):
            switch state {
            case .active:
                return Action(write: .revoke(revocation, reason: reason.map(String.init), kind: kind), verdict: .revoked)
            case .revoked(let recorded) where revocation > recorded:
                // Refunded again after a reversal: the later refund's date is kept, so the reversal in between,
                // whichever order the two queries return them in, cannot restore the row.
                return Action(write: .revokeLater(revocation, reason: reason.map(String.init), kind: kind), verdict: .unchanged)
            default:
                return Action(write: nil, verdict: .unchanged)
            }
        case .refund(nil, _, _):
            return Action(write: nil, verdict: .notRevoked)
        case .reversal(let signedAt, nil):
            // A reversal restores only the refund it came after: one recorded later than it stands.
            if case .revoked(let recorded) = state, recorded < signedAt {
                return Action(write: .restore(reversedAt: signedAt), verdict: .restored)
            }
            return Action(write: nil, verdict: .unchanged)
        case .reversal(_, .some):
            return Action(write: nil, verdict: .stillRevoked)
        }
    }
}

/// `"CaregiverEntitlement".status` (SPEC 2.1); the raw values are the column's.
public enum EntitlementStatus: String, Sendable {
    case active = "ACTIVE"
    case revoked = "REVOKED"
}
