@testable import AppStore
import Foundation
import Testing

/// The one entitlement rule, as a table: every row state against every kind of verified evidence.
@Suite("Entitlement decision")
struct EntitlementDecisionTests {
    typealias State = EntitlementDecision.State
    typealias Evidence = EntitlementDecision.Evidence
    typealias Action = EntitlementDecision.Action

    static let refundedAt = Date(timeIntervalSince1970: 1_770_000_000)
    static let earlier = refundedAt.addingTimeInterval(-3600)
    static let later = refundedAt.addingTimeInterval(3600)

    static let table: [(State, Evidence, Action)] = [
        // The sweep: a transaction looked up at Apple.
        (.active, .lookup(revocation: refundedAt, reason: 1), Action(write: .revoke(refundedAt, reason: "1"), verdict: .revoked)),
        (.active, .lookup(revocation: nil, reason: nil), Action(write: .stillActive, verdict: .active)),
        (.revoked(at: earlier), .lookup(revocation: refundedAt, reason: 0), Action(write: .revoke(refundedAt, reason: "0"), verdict: .unchanged)),
        (.revoked(at: refundedAt), .lookup(revocation: nil, reason: nil), Action(write: .restore(), verdict: .restored)),
        (.revokedElsewhere, .lookup(revocation: nil, reason: nil), Action(write: nil, verdict: .unchanged)),
        (.revokedElsewhere, .lookup(revocation: refundedAt, reason: nil), Action(write: nil, verdict: .unchanged)),
        // A REFUND notification.
        (.active, .refund(revocation: refundedAt, reason: nil), Action(write: .revoke(refundedAt, reason: nil), verdict: .revoked)),
        (.active, .refund(revocation: nil, reason: nil), Action(write: nil, verdict: .notRevoked)),
        (.revoked(at: earlier), .refund(revocation: refundedAt, reason: 1), Action(write: .revokeLater(refundedAt, reason: "1"), verdict: .unchanged)),
        (.revoked(at: later), .refund(revocation: refundedAt, reason: 1), Action(write: nil, verdict: .unchanged)),
        (.revoked(at: refundedAt), .refund(revocation: refundedAt, reason: 1), Action(write: nil, verdict: .unchanged)),
        (.revokedElsewhere, .refund(revocation: refundedAt, reason: 1), Action(write: nil, verdict: .unchanged)),
        // A REFUND_REVERSED notification.
        (.revoked(at: earlier), .reversal(signedAt: refundedAt, revocation: nil), Action(write: .restore(reversedAt: refundedAt), verdict: .restored)),
        (.revoked(at: later), .reversal(signedAt: refundedAt, revocation: nil), Action(write: nil, verdict: .unchanged)),
        (.active, .reversal(signedAt: refundedAt, revocation: nil), Action(write: nil, verdict: .unchanged)),
        (.revoked(at: earlier), .reversal(signedAt: refundedAt, revocation: later), Action(write: nil, verdict: .stillRevoked)),
        (.revokedElsewhere, .reversal(signedAt: refundedAt, revocation: nil), Action(write: nil, verdict: .unchanged)),
        // A status the contract does not name: never written, whatever the evidence.
        (.other("PAUSED"), .refund(revocation: refundedAt, reason: 1), Action(write: nil, verdict: .unchanged)),
        (.other("PAUSED"), .lookup(revocation: nil, reason: nil), Action(write: nil, verdict: .unchanged)),
    ]

    @Test(arguments: table.indices)
    func decision(_ index: Int) {
        let (state, evidence, expected) = Self.table[index]
        #expect(EntitlementDecision.decide(state, evidence) == expected, "\(state) + \(evidence)")
    }

    @Test func state_isDecodedFromStatusAndRevokedAt() {
        #expect(State(status: "ACTIVE", revokedAt: nil) == .active)
        #expect(State(status: "REVOKED", revokedAt: Self.refundedAt) == .revoked(at: Self.refundedAt))
        #expect(State(status: "REVOKED", revokedAt: nil) == .revokedElsewhere)
        #expect(State(status: "PAUSED", revokedAt: nil) == .other("PAUSED"))
    }
}
