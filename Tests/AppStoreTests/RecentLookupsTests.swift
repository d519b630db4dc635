import Foundation
import Postgres
import Synchronization
import Testing
import TestSupport
@testable import AppStore

/// Issue 45 (SPEC §4): a sweep whose lookups all fail the same way is an outage of the re-checks, and `/readyz`
/// `app_store` says so; a few failures among verified answers are not.
@Suite("App Store lookups that all fail", .blockingFixtures)
struct RecentLookupsTests {
    @Test func problem_onlyWhenEveryRecentLookupFailed() {
        #expect(RecentLookups.problem(Array(repeating: "not_found", count: 4)) == nil)  // too few to say
        #expect(RecentLookups.problem(Array(repeating: "untrusted_chain", count: 20))
                == "every recent App Store lookup failed (the last 20: untrusted_chain 20): refunds are not being applied")
        #expect(RecentLookups.problem(["not_found", "server_error", "not_found", "not_found", "transport_error"])
                == "every recent App Store lookup failed (the last 5: not_found 3, server_error 1, transport_error 1): refunds are not being applied")
        #expect(RecentLookups.problem(Array(repeating: "not_found", count: 19) + ["active"]) == nil)
    }

    @Test func readiness_keyRefusalComesFirst_andRecoveryIsReported() {
        let reported = Recorder<String?>()
        let readiness = AppStoreReadiness(report: { reason in reported.record(reason) })
        let lookups = RecentLookups(onStatus: { readiness.lookups($0) })
        for _ in 0..<5 { lookups.record("untrusted_chain") }
        readiness.key("401 from Production")
        readiness.key(nil)
        lookups.record("active")
        #expect(reported.all == [
            "every recent App Store lookup failed (the last 5: untrusted_chain 5): refunds are not being applied",
            "401 from Production",
            "every recent App Store lookup failed (the last 5: untrusted_chain 5): refunds are not being applied",
            nil,
        ])
    }

    /// A wrong root certificate: every signed answer is refused as untrusted_chain, and the sweep reports it.
    @Test func wrongRootCertificate_everyLookupUntrusted_isReportedForReadiness() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let pki = ApplePKI.shared
            let statuses = Recorder<String?>()
            let rig = try EntitlementRecheckerTests.rig(conninfo, onKeyStatus: { status in statuses.record(status) })
            defer { rig.stop() }
            let db = PostgresClient(conninfo: conninfo)
            for index in 1...6 {
                let transaction = "830000000\(index)"
                try await EntitlementRecheckerTests.insert(db, id: "e-\(index)", transaction: transaction)
                rig.production.answer(transaction, .signed(try pki.signedTransaction(
                    ApplePKI.payload(transactionId: transaction, original: transaction), chain: pki.untrustedChain, keyPEM: pki.untrustedLeafKeyPEM)))
            }
            _ = try await rig.rechecker.runOnce()
            #expect(statuses.last == .some(
                "every recent App Store lookup failed (the last 6: untrusted_chain 6): refunds are not being applied"))
            #expect(try await db.query(#"SELECT count(*) AS n FROM "CaregiverEntitlement" WHERE status = \#(literal: EntitlementStatus.active)"#)[0]["n"].int() == 6)
        }
    }
}
