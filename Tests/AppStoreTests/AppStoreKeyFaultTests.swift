import Crypto
import Foundation
import HTTP
import Logging
import Metrics
import Postgres
import Synchronization
import Testing
import TestSupport
@testable import AppStore

/// Apple refusing our key (401 to every request: a revoked key, a wrong issuer or bundle id) is the project's fault:
/// no entitlement changes, no row is marked checked, the environment pauses with backoff, readiness names it once,
/// and checks resume by themselves once Apple accepts the key again.
@Suite("App Store key refused (401)", .blockingFixtures)
struct AppStoreKeyFaultTests {
    @Test func keyRefused_changesNothing_pausesWithBackoff_isReported_andRecovers() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let pki = ApplePKI.shared
            let statuses = Recorder<String?>()
            let sink = MemorySink()
            let rig = try EntitlementRecheckerTests.rig(conninfo, sink: sink, configure: { $0.keyRefusedBackoff = .seconds(5) },
                                                        onKeyStatus: { status in statuses.record(status) })
            defer { rig.stop() }
            let (production, rechecker) = (rig.production, rig.rechecker)
            let db = PostgresClient(conninfo: conninfo)
            try await EntitlementRecheckerTests.insert(db, id: "e-1", transaction: "8100000001", status: "REVOKED", revokedAt: "2026-01-01 00:00:00+00")
            try await EntitlementRecheckerTests.insert(db, id: "e-2", transaction: "8100000002")
            production.answer("8100000001", .signed(try pki.signedTransaction(ApplePKI.payload(transactionId: "8100000001", original: "8100000001"))))
            production.answer("8100000002", .notFound)
            let before = try await db.query(#"SELECT id, status, "revokedAt" FROM "CaregiverEntitlement" ORDER BY id"#)

            production.refuseAll()
            _ = try await rechecker.runOnce()
            let refusedInThePass = production.refused
            #expect(refusedInThePass >= 1 && refusedInThePass <= 2)  // the lookups already in flight when the first 401 came
            _ = try await rechecker.runOnce()  // paused: no request goes out
            #expect(production.refused == refusedInThePass, "requests during the pause")
            let after = try await db.query(#"SELECT id, status, "revokedAt", "lastCheckedAt", "checkFailures" FROM "CaregiverEntitlement" ORDER BY id"#)
            for (old, new) in zip(before, after) {
                #expect(try old["status"].string() == new["status"].string())
                #expect(new["lastCheckedAt"].isNull)
                #expect(try new["checkFailures"].int() == 0)
            }
            #expect(try after[0]["revokedAt"].optionalDate() == before[0]["revokedAt"].optionalDate())
            let reason = try #require(statuses.last ?? nil)
            #expect(reason.contains("401") && reason.contains("Production"))
            #expect(sink.entries.filter { $0.level == .error }.count == 1)  // once per episode

            production.refuseAll(false)
            // The pause (5 s, doubled per refusal in flight) ends and the next pass goes out by itself.
            try await eventually("a pass goes out and the environment's pause is cleared", timeout: .seconds(40), every: .milliseconds(500)) {
                _ = try await rechecker.runOnce()
                return statuses.last == .some(nil)
            }
            let checked = try await db.query(#"SELECT count(*) AS n FROM "CaregiverEntitlement" WHERE "lastCheckedAt" IS NOT NULL OR "checkFailures" > 0"#)
            #expect(try checked[0]["n"].int() == 2)
            #expect(try await EntitlementRecheckerTests.row(db, "e-1").status == .active)  // the verified answer restored it
        }
    }
}
