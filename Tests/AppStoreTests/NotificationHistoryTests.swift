import AppStore
import Foundation
import Logging
import Metrics
import Postgres
import Testing
import TestSupport

/// Refunds found in minutes (SPEC §4): Get Notification History paged from a checkpoint in the database, each
/// notification and its transaction verified, revoke / restore applied only on verified evidence.
@Suite("App Store notification history", .serialized, .blockingFixtures)
struct NotificationHistoryTests {
    typealias R = EntitlementRecheckerTests

    static func historyRig(_ conninfo: String) throws -> R.Rig {
        try R.rig(conninfo) { configuration in
            configuration.notificationHistory = true
            configuration.notificationPollInterval = .seconds(2)
        }
    }

    static func refund(_ pki: ApplePKI, _ id: String, revocation: Int64 = 1_770_000_000_000, reason: Int = 1,
                       environment: String = "Production") throws -> String {
        try pki.signedNotification(type: "REFUND", transaction: try pki.signedTransaction(
            ApplePKI.payload(transactionId: id, original: id, environment: environment, revocationDate: revocation, revocationReason: reason)),
            environment: environment)
    }

    static func refundQueries(_ fake: FakeAppStore) -> [FakeAppStore.HistoryQuery] { fake.historyQueries.filter { $0.type == "REFUND" } }

    /// Apple's 2025 changes: a REVOKE (Family Sharing ended, `revocationType` FAMILY_REVOKE) is asked for and revokes in
    /// minutes; a REFUND with REFUND_PRORATED revokes too and records its percentage; a reversal clears both columns.
    @Test func revokeWithFamilyRevoke_andProratedRefund_revoke_andRecordTypeAndPercentage() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            try await R.insert(rig.db, id: "family", transaction: "7610000001")
            try await R.insert(rig.db, id: "prorated", transaction: "7610000002")
            rig.production.record("REVOKE", signedPayload: try pki.signedNotification(type: "REVOKE", transaction: try pki.signedTransaction(
                ApplePKI.payload(transactionId: "7610000001", original: "7610000001", revocationDate: 1_770_000_000_000, revocationReason: 0,
                                 revocationType: "FAMILY_REVOKE", ownership: "FAMILY_SHARED"))))
            rig.production.record("REFUND", signedPayload: try pki.signedNotification(type: "REFUND", transaction: try pki.signedTransaction(
                ApplePKI.payload(transactionId: "7610000002", original: "7610000002", revocationDate: 1_770_000_100_000, revocationReason: 1,
                                 revocationType: "REFUND_PRORATED", revocationPercentage: 40_000))))
            let summary = try await #require(rig.rechecker.history).pollOnce()
            #expect(summary.verdicts == ["revoked": 2])
            #expect(rig.metrics.value("appstore_notifications_total", labels: ["type": "REVOKE", "verdict": "revoked"]) == 1)
            #expect(rig.production.historyQueries.contains { $0.type == "REVOKE" })
            func kind(_ id: String) async throws -> String {
                let row = try await rig.db.query(#"""
                    SELECT status, "revocationReason", "revocationType", "revocationPercentage" FROM "CaregiverEntitlement" WHERE id = \#(id)
                    """#)[0]
                return [try row["status"].string(), row["revocationReason"].optionalString() ?? "-", row["revocationType"].optionalString() ?? "-",
                        try row["revocationPercentage"].optionalInt().map(String.init) ?? "-"].joined(separator: " ")
            }
            #expect(try await kind("family") == "REVOKED 0 FAMILY_REVOKE -")
            #expect(try await kind("prorated") == "REVOKED 1 REFUND_PRORATED 40000")
            #expect(try await R.row(rig.db, "family").revokedAtMillis == 1_770_000_000_000)

            // Apple reverses the prorated refund: the row comes back and the revocation's columns are cleared.
            rig.production.record("REFUND_REVERSED", signedPayload: try pki.signedNotification(type: "REFUND_REVERSED", transaction: try pki.signedTransaction(
                ApplePKI.payload(transactionId: "7610000002", original: "7610000002"))))
            _ = try await #require(rig.rechecker.history).pollOnce()
            #expect(try await kind("prorated") == "ACTIVE - - -")
            #expect(try await kind("family") == "REVOKED 0 FAMILY_REVOKE -")
        }
    }

    @Test func refundsAcrossTwoPages_revoke_andTheCheckpointSurvivesARestart() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            for n in 0..<25 {
                let id = "76000000\(String(format: "%02d", n))"
                try await R.insert(rig.db, id: "n-\(n)", transaction: id)
                rig.production.record("REFUND", signedPayload: try Self.refund(pki, id, revocation: 1_770_000_000_000 + Int64(n)))
            }
            let poller = try #require(rig.rechecker.history)
            let summary = try await poller.pollOnce()
            #expect(summary.verdicts == ["revoked": 25])
            for n in [0, 19, 20, 24] {
                let row = try await R.row(rig.db, "n-\(n)")
                #expect(row.status == .revoked && row.revokedAtMillis == 1_770_000_000_000 + Int64(n) && row.reason == "1")
            }
            #expect(rig.metrics.value("appstore_notifications_total", labels: ["type": "REFUND", "verdict": "revoked"]) == 25)
            #expect(rig.metrics.value("entitlements_revoked_total") == 25)
            let refunds = Self.refundQueries(rig.production)
            #expect(refunds.count == 2 && refunds[0].paginationToken == nil && refunds[1].paginationToken != nil)
            #expect(refunds[1].startMillis == refunds[0].startMillis && refunds[1].endMillis == refunds[0].endMillis)
            // Both types, both environments, each from its own base URL; Apple's 180 / 30 days respected (the fake checks).
            #expect(Set(rig.production.historyQueries.compactMap(\.type)) == ["REFUND", "REVOKE", "REFUND_REVERSED"])
            #expect(Set(rig.sandbox.historyQueries.compactMap(\.type)) == ["REFUND", "REVOKE", "REFUND_REVERSED"])
            #expect(rig.production.requests.isEmpty)  // no per-transaction lookup was needed

            // A restarted worker starts from the stored checkpoint (the last window's end less the overlap), not from scratch.
            let restarted = try rig.restarted()
            defer { restarted.shutdown() }
            let again = try await #require(restarted.history).pollOnce()
            #expect(again.verdicts["revoked"] == nil)  // the overlap re-reads nothing new; nothing changes twice
            let next = Self.refundQueries(rig.production)[2]
            #expect(next.startMillis == refunds[0].endMillis - 300_000)
        }
    }

    @Test func unverifiableNotifications_changeNothing_andAreCounted() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            for n in 1...5 { try await R.insert(rig.db, id: "u-\(n)", transaction: "770000000\(n)") }
            let revoked = { (id: String) in ApplePKI.payload(transactionId: id, original: id, revocationDate: 1_770_000_000_000, revocationReason: 0) }
            // 1: the notification is signed by a look-alike chain.
            rig.production.record("REFUND", signedPayload: try pki.signedNotification(
                type: "REFUND", transaction: try pki.signedTransaction(revoked("7700000001")), chain: pki.untrustedChain, keyPEM: pki.untrustedLeafKeyPEM))
            // 2: the notification is for another app.
            rig.production.record("REFUND", signedPayload: try pki.signedNotification(
                type: "REFUND", transaction: try pki.signedTransaction(revoked("7700000002")), bundle: "com.other.app"))
            // 3: genuine notification, but the transaction inside is signed by the look-alike chain.
            rig.production.record("REFUND", signedPayload: try pki.signedNotification(
                type: "REFUND", transaction: try pki.signedTransaction(revoked("7700000003"), chain: pki.untrustedChain, keyPEM: pki.untrustedLeafKeyPEM)))
            // 4: genuine, but Apple's transaction is not revoked.
            rig.production.record("REFUND", signedPayload: try pki.signedNotification(
                type: "REFUND", transaction: try pki.signedTransaction(ApplePKI.payload(transactionId: "7700000004", original: "7700000004"))))
            // 5: genuine, but the transaction inside is another app's.
            rig.production.record("REFUND", signedPayload: try pki.signedNotification(
                type: "REFUND", transaction: try pki.signedTransaction(ApplePKI.payload(transactionId: "7700000005", original: "7700000005",
                                                                                         bundle: "com.other.app", revocationDate: 1_770_000_000_000))))
            // And one for a purchase this database does not know.
            rig.production.record("REFUND", signedPayload: try Self.refund(pki, "7799999999"))
            let summary = try await #require(rig.rechecker.history).pollOnce()
            #expect(summary.verdicts == ["untrusted_chain": 2, "bundle_id_mismatch": 2, "not_revoked": 1, "no_entitlement": 1])
            for n in 1...5 {
                let row = try await R.row(rig.db, "u-\(n)")
                #expect(row.status == .active && row.revokedAtMillis == nil)
            }
            #expect(rig.metrics.value("appstore_notifications_total", labels: ["type": "REFUND", "verdict": "untrusted_chain"]) == 2)
            #expect(rig.metrics.value("entitlements_revoked_total") == 0)
        }
    }

    @Test func refundReversed_restoresOnlyThisWorkersRevocations() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            try await R.insert(rig.db, id: "ours", transaction: "7800000001", status: "REVOKED", revokedAt: "2026-01-01 00:00:00+00")
            try await R.insert(rig.db, id: "by-support", transaction: "7800000002", status: "REVOKED")
            try await R.insert(rig.db, id: "ours-still", transaction: "7800000003", status: "REVOKED", revokedAt: "2026-01-01 00:00:00+00")
            try await R.insert(rig.db, id: "sandbox-ours", transaction: "7800000004", environment: "Sandbox", status: "REVOKED",
                               revokedAt: "2026-01-01 00:00:00+00")
            for id in ["7800000001", "7800000002"] {
                rig.production.record("REFUND_REVERSED", signedPayload: try pki.signedNotification(
                    type: "REFUND_REVERSED", transaction: try pki.signedTransaction(ApplePKI.payload(transactionId: id, original: id))))
            }
            // Apple's transaction still carries a revocation: nothing is restored.
            rig.production.record("REFUND_REVERSED", signedPayload: try pki.signedNotification(
                type: "REFUND_REVERSED", transaction: try pki.signedTransaction(ApplePKI.payload(
                    transactionId: "7800000003", original: "7800000003", revocationDate: 1_770_000_000_000))))
            rig.sandbox.record("REFUND_REVERSED", signedPayload: try pki.signedNotification(
                type: "REFUND_REVERSED", transaction: try pki.signedTransaction(ApplePKI.payload(
                    transactionId: "7800000004", original: "7800000004", environment: "Sandbox")), environment: "Sandbox"))
            let summary = try await #require(rig.rechecker.history).pollOnce()
            #expect(summary.verdicts == ["restored": 2, "unchanged": 1, "still_revoked": 1])
            let ours = try await R.row(rig.db, "ours")
            #expect(ours.status == .active && ours.revokedAtMillis == nil && ours.reason == nil)
            #expect(try await R.row(rig.db, "sandbox-ours").status == .active)
            let support = try await R.row(rig.db, "by-support")
            #expect(support.status == .revoked && !support.checked)
            #expect(try await R.row(rig.db, "ours-still").status == .revoked)
            #expect(rig.metrics.value("entitlements_restored_total") == 2)
        }
    }

    @Test func refundReversalRefund_inOneWindow_endsRevokedInEitherOrder() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            // Inside the test chain's validity (it starts now): an hour apart, from a minute from now.
            let step: Int64 = 3_600_000, first = Int64(Date().timeIntervalSince1970 * 1000) + 60_000
            func refund(_ id: String, at millis: Int64) throws -> String {
                try pki.signedNotification(type: "REFUND", transaction: try pki.signedTransaction(
                    ApplePKI.payload(transactionId: id, original: id, revocationDate: millis, revocationReason: 1)), signedDate: millis)
            }
            func reversal(_ id: String, at millis: Int64) throws -> String {
                try pki.signedNotification(type: "REFUND_REVERSED", transaction: try pki.signedTransaction(
                    ApplePKI.payload(transactionId: id, original: id)), signedDate: millis)
            }
            // Refunded, reversed later, refunded again after that; the REFUND query returns the two
            // refunds oldest first for one purchase and newest first for the other, and REFUND_REVERSED is read after both.
            try await R.insert(rig.db, id: "in-order", transaction: "7810000001")
            try await R.insert(rig.db, id: "newest-first", transaction: "7810000002")
            try await R.insert(rig.db, id: "reversed-once", transaction: "7810000003")
            rig.production.record("REFUND", signedPayload: try refund("7810000001", at: first))
            rig.production.record("REFUND", signedPayload: try refund("7810000001", at: first + 2 * step))
            rig.production.record("REFUND", signedPayload: try refund("7810000002", at: first + 2 * step))
            rig.production.record("REFUND", signedPayload: try refund("7810000002", at: first))
            rig.production.record("REFUND", signedPayload: try refund("7810000003", at: first))
            for id in ["7810000001", "7810000002", "7810000003"] {
                rig.production.record("REFUND_REVERSED", signedPayload: try reversal(id, at: first + step))
            }
            let summary = try await #require(rig.rechecker.history).pollOnce()
            #expect(summary.verdicts == ["revoked": 3, "unchanged": 4, "restored": 1])
            for id in ["in-order", "newest-first"] {
                let row = try await R.row(rig.db, id)
                #expect(row.status == .revoked, "\(id)")
                #expect(row.revokedAtMillis == first + 2 * step, "\(id): the later refund's date is kept")
            }
            #expect(try await R.row(rig.db, "reversed-once").status == .active)
            // Read again (the overlap): every row ends where it was.
            _ = try await #require(rig.rechecker.history).pollOnce()
            #expect(try await R.row(rig.db, "in-order").status == .revoked)
            #expect(try await R.row(rig.db, "newest-first").revokedAtMillis == first + 2 * step)
            #expect(try await R.row(rig.db, "reversed-once").status == .active)
        }
    }

    /// A refund and its reversal recorded by Apple in one window, and the REFUND query failing (Apple's 500) in the round
    /// that reads the window: REFUND_REVERSED is not read past REFUND that round, so in the next the refund revokes and
    /// then its reversal restores (before: the reversal was read that round while the row was still active, passed by,
    /// its window closed; the refund read next round revoked a paid purchase until the sweep).
    @Test func refundQueryFailing_reversalIsNotReadPastIt_theRowEndsActive() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            // Signed inside the test chain's validity (it starts now); recorded by Apple 20 and 15 minutes ago, before the
            // next window's overlap.
            let now = Int64(Date().timeIntervalSince1970 * 1000), signed = now + 60_000
            try await R.insert(rig.db, id: "reversed", transaction: "7820000001")
            rig.production.record("REFUND", signedPayload: try pki.signedNotification(type: "REFUND", transaction: try pki.signedTransaction(
                ApplePKI.payload(transactionId: "7820000001", original: "7820000001", revocationDate: signed, revocationReason: 1)), signedDate: signed),
                atMillis: now - 20 * 60_000)
            rig.production.record("REFUND_REVERSED", signedPayload: try pki.signedNotification(type: "REFUND_REVERSED", transaction: try pki.signedTransaction(
                ApplePKI.payload(transactionId: "7820000001", original: "7820000001")), signedDate: signed + 3_600_000),
                atMillis: now - 15 * 60_000)
            let history = try #require(rig.rechecker.history)
            rig.production.failHistory(type: "REFUND", with: 500)
            _ = try await history.pollOnce()
            #expect(try await R.row(rig.db, "reversed").status == .active)
            rig.production.failHistory(type: "REFUND", with: nil)
            let summary = try await history.pollOnce()
            #expect(summary.verdicts == ["revoked": 1, "restored": 1])
            #expect(try await R.row(rig.db, "reversed").status == .active)
        }
    }

    @Test func windowCutShort_resumesWithItsOwnTokenAfterARestart() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            for n in 0..<25 {
                let id = "79000000\(String(format: "%02d", n))"
                try await R.insert(rig.db, id: "w-\(n)", transaction: id)
                rig.production.record("REFUND", signedPayload: try Self.refund(pki, id))
            }
            rig.production.failHistory(with: 500, after: 1)  // page 1 answers, then Apple fails
            let first = try await #require(rig.rechecker.history).pollOnce()
            #expect(first.verdicts == ["revoked": 20])
            rig.production.failHistory(with: nil)
            let restarted = try rig.restarted()
            defer { restarted.shutdown() }
            let second = try await #require(restarted.history).pollOnce()
            #expect(second.verdicts == ["revoked": 5])
            let refunds = Self.refundQueries(rig.production)
            // The resumed call is page 2 of the same window, with the stored token.
            let resumed = refunds[2]
            #expect(resumed.paginationToken != nil && resumed.paginationToken == refunds[1].paginationToken)
            #expect(resumed.startMillis == refunds[0].startMillis && resumed.endMillis == refunds[0].endMillis)
        }
    }

    @Test func refundRecordedByApple_isRevokedByTheRunningLoop() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.historyRig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            try await R.insert(rig.db, id: "live", transaction: "7900000099")
            // Checked already: the sweep will not look at it for hours; only the history can find the refund.
            try await rig.db.query(#"UPDATE "CaregiverEntitlement" SET "nextCheckAt" = now() + interval '5 hours', "lastCheckedAt" = now()"#)
            let loop = Task { await rig.rechecker.run() }
            defer { loop.cancel() }
            try await Task.sleep(for: .milliseconds(300))
            rig.production.record("REFUND", signedPayload: try Self.refund(pki, "7900000099"))
            try await eventually("the refund changes the entitlement", timeout: .seconds(15), every: .milliseconds(50)) {
                try await R.row(rig.db, "live").status != .active
            }
            #expect(try await R.row(rig.db, "live").status == .revoked)
            #expect(rig.production.requests.isEmpty)
            loop.cancel()
            await loop.value
        }
    }
}
