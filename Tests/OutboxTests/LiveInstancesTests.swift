import Foundation
import Outbox
import Postgres
import Testing
import TestSupport

/// The FCM budget shared through the live-instances table (SPEC §3 "FCM's project quota"): the shares the heartbeats
/// record never add up to more than the budget, however the heartbeats interleave, and they settle at an even split.
@Suite("Live instances share the FCM budget", .blockingFixtures)
struct LiveInstancesTests {
    /// (budget, live, the others' recorded shares, this instance's share).
    @Test(arguments: [
        (36.0, 1, 0.0, 36.0),
        (36.0, 2, 36.0, 0.0),    // the other has not seen this one yet
        (36.0, 2, 18.0, 18.0),
        (36.0, 3, 12.0, 12.0),   // one other at 12, one not yet: an even split is all it takes
        (36.0, 2, 0.0, 18.0),    // never more than an even split
        (36.0, 2, 40.0, 0.0),    // an older budget above this one's
    ])
    func share(budget: Double, live: Int, othersHold: Double, expected: Double) {
        #expect(LiveInstances.share(of: budget, live: live, othersHold: othersHold) == expected)
    }

    /// Three instances heartbeat at the same moment: the first takes the whole budget, the others nothing and wait;
    /// in later rounds the first lowers to its even split (told before the share is recorded) and the others rise to
    /// theirs. A clean stop's share returns to the others at their next heartbeats.
    @Test func instancesStartingTogether_sharesNeverAddUpToMoreThanTheBudget_andSettleEven() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let instances = (0..<3).map { _ in LiveInstances(client: PostgresClient(conninfo: conninfo, maxConnections: 1)) }
            let lowered = Recorder<Double>()
            func beat(_ instance: LiveInstances) async throws -> LiveInstances.Heartbeat {
                try await instance.heartbeat(version: "9.9.9", budget: 36, lowering: { lowered.record($0) })
            }
            let first = try await withThrowingTaskGroup(of: LiveInstances.Heartbeat.self) { group in
                for instance in instances { group.addTask { try await beat(instance) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(first.compactMap(\.share).sorted() == [0, 0, 36])
            #expect(first.filter(\.waiting).count == 2)
            var rounds: [[Double]] = []
            for _ in 0..<3 {
                var shares: [Double] = []
                for instance in instances { shares.append(try await beat(instance).share ?? -1) }
                #expect(shares.reduce(0, +) <= 36 + 1e-9, "shares: \(shares)")
                rounds.append(shares)
            }
            #expect(rounds.last.map { $0.allSatisfy { abs($0 - 12) < 1e-9 } } == true, "rounds: \(rounds)")
            #expect(lowered.all == [12])

            try await instances[2].leave()
            var shares: [Double] = []
            for _ in 0..<2 {
                shares = []
                for instance in instances.prefix(2) { shares.append(try await beat(instance).share ?? -1) }
            }
            #expect(shares == [18, 18])
        }
    }
}
