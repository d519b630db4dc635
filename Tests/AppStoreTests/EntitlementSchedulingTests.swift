import AppStore
import Foundation
import Logging
import Metrics
import Postgres
import Testing
import TestSupport

/// Scale and fairness (SPEC §4): per-row schedule and backoff in the database, the rate, Apple's 429, stopping mid-pass.
@Suite("Entitlement scheduling, rate and stop", .serialized, .blockingFixtures)
struct EntitlementSchedulingTests {
    typealias R = EntitlementRecheckerTests

    /// The row's schedule: seconds until it is due (negative: overdue; nil: never scheduled), failures, last error.
    static func schedule(_ db: PostgresClient, _ id: String) async throws -> (dueIn: Double?, failures: Int, error: String?) {
        let row = try await db.query(#"""
            SELECT extract(epoch FROM "nextCheckAt" - now())::double precision AS due_in, "checkFailures", "lastCheckError"
            FROM "CaregiverEntitlement" WHERE id = \#(id)
            """#)[0]
        return (row["due_in"].isNull ? nil : try row["due_in"].double(), try row["checkFailures"].int(), row["lastCheckError"].optionalString())
    }

    @Test func pacer_spacesSlotsEvenly_andNeverInsideAPause() {
        var state = RatePacer.State()
        let start = ContinuousClock.now
        let spacing = Duration.milliseconds(50)
        let slots = (0..<5).map { _ in RatePacer.reserve(&state, now: start, spacing: spacing) }
        #expect(slots == (0..<5).map { start + spacing * $0 })
        state.pausedUntil = start + .seconds(10)
        #expect(RatePacer.reserve(&state, now: start, spacing: spacing) == start + .seconds(10))
        #expect(RatePacer.reserve(&state, now: start, spacing: spacing) == start + .seconds(10) + spacing)
    }

    @Test func failingRowsAhead_neverStarveRefundedOnes_andAreLookedUpOncePerBackoffStep() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try R.rig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            // 300 rows Apple never finds, all ahead of the refunded ones (never scheduled, lower ids).
            try await rig.db.query(#"""
                INSERT INTO "CaregiverEntitlement" (id, "caregiverId", "productId", "originalTransactionId", "transactionId", environment, status, "purchasedAt")
                SELECT 'f-' || lpad(n::text, 3, '0'), 'c1', 'premium.monthly', '70' || lpad(n::text, 8, '0'), '70' || lpad(n::text, 8, '0'),
                       'Production', \#(literal: EntitlementStatus.active), now()
                FROM generate_series(1, 300) AS n
                """#)
            for n in 1...5 {
                let id = "800000000\(n)"
                try await R.insert(rig.db, id: "r-\(n)", transaction: id)
                rig.production.answer(id, .signed(try pki.signedTransaction(
                    ApplePKI.payload(transactionId: id, original: id, revocationDate: 1_770_000_000_000 + Int64(n), revocationReason: 0))))
            }
            try await rig.db.query(#"UPDATE "CaregiverEntitlement" SET "nextCheckAt" = now() - interval '1 minute' WHERE id LIKE 'r-%'"#)

            let first = try await rig.rechecker.runOnce()
            #expect(first.revoked == 5 && first.failed == 300)
            for n in 1...5 { #expect(try await R.row(rig.db, "r-\(n)").status == .revoked) }
            let failing = try await Self.schedule(rig.db, "f-001")
            #expect(failing.failures == 1 && failing.error == "not_found")
            #expect((failing.dueIn ?? 0) > 50 && (failing.dueIn ?? 0) <= 60)  // the first backoff step: 60 s
            // Not due: nothing is asked again, and a restarted worker remembers (the schedule is in the database).
            #expect(try await rig.rechecker.runOnce().checked == 0)
            #expect(try await rig.restarted().runOnce().checked == 0)
            #expect(rig.production.requests.count == 305)

            // The backoff step passes: each failing row is asked exactly once more, and the next step is twice as long.
            try await rig.db.query(#"UPDATE "CaregiverEntitlement" SET "nextCheckAt" = now() - interval '1 second' WHERE id LIKE 'f-%'"#)
            #expect(try await rig.rechecker.runOnce().failed == 300)
            let counts = Dictionary(grouping: rig.production.requests, by: { $0 }).mapValues(\.count)
            #expect(counts.filter { $0.key.hasPrefix("70") }.values.allSatisfy { $0 == 2 })
            #expect(counts.filter { $0.key.hasPrefix("80") }.values.allSatisfy { $0 == 1 })
            let second = try await Self.schedule(rig.db, "f-150")
            #expect(second.failures == 2 && (second.dueIn ?? 0) > 110 && (second.dueIn ?? 0) <= 120)

            // Capped at the interval (6 h) however long the row has been failing.
            try await rig.db.query(#"UPDATE "CaregiverEntitlement" SET "nextCheckAt" = now() - interval '1 second', "checkFailures" = 30 WHERE id = 'f-001'"#)
            _ = try await rig.rechecker.runOnce()
            let capped = try await Self.schedule(rig.db, "f-001")
            #expect(capped.failures == 31 && (capped.dueIn ?? 0) > 6 * 3600 - 60 && (capped.dueIn ?? 0) <= 6 * 3600)
            // A good answer clears the failures and schedules the next check about an interval ahead (less up to a tenth).
            let refunded = try await Self.schedule(rig.db, "r-1")
            #expect(refunded.failures == 0 && refunded.error == nil && (refunded.dueIn ?? 0) > 0.9 * 6 * 3600 - 60)
        }
    }

    @Test func requestsPerSecond_neverExceedTheConfiguredRate() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try R.rig(conninfo) { configuration in configuration.setRequestsPerSecond(20) }
            defer { rig.stop() }
            try await rig.db.query(#"""
                INSERT INTO "CaregiverEntitlement" (id, "caregiverId", "productId", "originalTransactionId", "transactionId", environment, status, "purchasedAt")
                SELECT 'e-' || n, 'c1', 'premium.monthly', '71' || lpad(n::text, 8, '0'), '71' || lpad(n::text, 8, '0'),
                       CASE WHEN n <= 60 THEN 'Production' ELSE 'Sandbox' END, \#(literal: EntitlementStatus.active), now()
                FROM generate_series(1, 64) AS n
                """#)
            let summary = try await rig.rechecker.runOnce()
            #expect(summary.checked == 64)
            // Counted where Apple would count them, in the fake, per sliding second. The worker spaces its slots exactly
            // 1/rate apart (pacer test above); three requests bunched by a stall of the client's or the fake's thread on a
            // loaded machine are the allowance, and the 60 arrivals still take about 3 s.
            func busiestSecond(_ times: [ContinuousClock.Instant]) -> Int {
                let sorted = times.sorted()
                return sorted.indices.map { i in sorted[i...].prefix { $0 - sorted[i] < .seconds(1) }.count }.max() ?? 0
            }
            #expect(rig.production.arrivalTimes.count == 60 && rig.sandbox.arrivalTimes.count == 4)
            #expect(busiestSecond(rig.production.arrivalTimes) <= 20 + 3)
            let production = rig.production.arrivalTimes.sorted()
            if let first = production.first, let last = production.last {
                #expect(last - first >= .milliseconds(2_700), "60 requests at 20/s arrived within \(last - first)")
            }
            #expect(busiestSecond(rig.sandbox.arrivalTimes) <= 2 + 1)
        }
    }

    @Test func rateLimit_pausesThatEnvironmentAsAWhole_andGivesItsRowsBack() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try R.rig(conninfo) { configuration in
                configuration.productionRate = 2
                configuration.sandboxRate = 10
            }
            defer { rig.stop() }
            for n in 0..<10 { try await R.insert(rig.db, id: "p-\(n)", transaction: "720000000\(n)") }
            for n in 0..<3 { try await R.insert(rig.db, id: "s-\(n)", transaction: "730000000\(n)", environment: "Sandbox") }
            let retryAt = Int64(Date().timeIntervalSince1970 * 1000) + 120_000
            rig.production.answer("7200000000", .rateLimited(retryAtMillis: retryAt))
            let summary = try await rig.rechecker.runOnce()
            #expect(summary.rateLimitedUntil.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } == retryAt)
            // Slots are 500 ms apart and the 429 (with the connection's handshake) comes back well within one: at most a slot
            // already granted follows it.
            #expect(rig.production.requests.count <= 2)
            #expect(rig.sandbox.requests.count == 3)  // the other environment carries on
            let limited = try await EntitlementSchedulingTests.schedule(rig.db, "p-0")
            #expect(limited.error == "rate_limited" && (limited.dueIn ?? 0) > 100)
            // The rows not asked are given back due, not left leased.
            let due = try await rig.db.query(#"""
                SELECT count(*) AS n FROM "CaregiverEntitlement" WHERE id LIKE 'p-%' AND "lastCheckError" IS NULL
                  AND COALESCE("nextCheckAt", '-infinity') <= now()
                """#)[0]["n"].int()
            #expect(due == 10 - rig.production.requests.count)
            // While the pause lasts, nothing more goes to production.
            let before = rig.production.requests.count
            _ = try await rig.rechecker.runOnce()
            #expect(rig.production.requests.count == before)
        }
    }

    @Test func stop_midPass_endsAtOnce_andGivesUnfinishedRowsBack() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try R.rig(conninfo) { configuration in configuration.productionRate = 5 }
            defer { rig.stop() }
            try await R.insert(rig.db, id: "a-stall", transaction: "7400000000")
            rig.production.answer("7400000000", .stall)
            for n in 1...30 { try await R.insert(rig.db, id: "b-\(n)", transaction: "75\(String(format: "%08d", n))") }
            let loop = Task { await rig.rechecker.run() }
            // Mid-pass: one lookup held by Apple, the others waiting for their rate slots.
            try await eventually("Apple holds a lookup", timeout: .seconds(5), every: .milliseconds(10)) { rig.production.stalledNow > 0 }
            #expect(rig.production.stalledNow == 1)
            loop.cancel()
            await loop.value  // returns without waiting for the stalled answer or the remaining slots
            #expect(rig.production.stalledNow == 1)
            let asked = Set(rig.production.requests)
            #expect(asked.count < 31)
            // Every row not answered is due again as it was (nothing leased ahead, nothing counted as a failure).
            let rows = try await rig.db.query(#"""
                SELECT count(*) FILTER (WHERE COALESCE("nextCheckAt", '-infinity') <= now() AND "checkFailures" = 0) AS due, count(*) AS total
                FROM "CaregiverEntitlement"
                """#)[0]
            let failedOrDone = try await rig.db.query(#"SELECT count(*) AS n FROM "CaregiverEntitlement" WHERE "checkFailures" > 0"#)[0]["n"].int()
            #expect(try rows["due"].int() + failedOrDone == 31)
            #expect(try await Self.schedule(rig.db, "a-stall").failures == 0)
        }
    }
}
