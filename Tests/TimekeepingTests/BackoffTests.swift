import Testing
import Timekeeping

@Suite("Backoff")
struct BackoffTests {
    @Test func seededJitter_staysInItsRange_andSpreadsNeighbouringSeeds() {
        let factors = (0..<10_000).map { Backoff.jitter(seed: UInt64($0)) }
        #expect(factors.allSatisfy { $0 >= 0.5 && $0 <= 1.0 })
        // Consecutive event ids must not retry together: the factors cover the range evenly.
        let mean = factors.reduce(0, +) / Double(factors.count)
        #expect(abs(mean - 0.75) < 0.01)
        let buckets = Dictionary(grouping: factors) { Int(($0 - 0.5) * 20) }
        #expect((0..<10).allSatisfy { (buckets[$0]?.count ?? 0) > 800 })
        #expect(Backoff.jitter(seed: 42) == Backoff.jitter(seed: 42))
    }

    @Test func delay_doublesFromTheBase_upToTheCap() {
        let backoff = Backoff(base: .seconds(2), cap: .seconds(60))
        #expect(backoff.delay(afterAttempt: 1, jitter: 1) == .seconds(2))
        #expect(backoff.delay(afterAttempt: 3, jitter: 1) == .seconds(8))
        #expect(backoff.delay(afterAttempt: 3, jitter: 0.5) == .seconds(4))
        #expect(backoff.delay(afterAttempt: 40, jitter: 1) == .seconds(60))
    }
}
