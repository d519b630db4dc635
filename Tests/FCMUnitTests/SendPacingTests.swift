import FCM
import Testing

/// The send-rate cap's values (SPEC §3 "FCM's project quota"): the token bucket, the rate meter and the AIMD limit,
/// driven by instants chosen by the test (no clock, no network).
@Suite("Send pacing values")
struct SendPacingTests {
    static let start = ContinuousClock.now

    static func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    /// (rate, burst, the instants of successive takes in ms, the answer of each: nil = taken, else the wait in ms).
    @Test(arguments: [
        // A full bucket lets `burst` go at once, then one every 1/rate.
        (10.0, 3.0, [0, 0, 0, 0], [nil, nil, nil, 100] as [Int?]),
        (10.0, 1.0, [0, 0, 50, 100, 100], [nil, 100, 50, nil, 100]),
        // Tokens earned while quiet are kept up to the burst, never more.
        (10.0, 2.0, [0, 0, 0, 1000, 1000, 1000], [nil, nil, 100, nil, nil, 100]),
        // A wait is the time to the next whole token.
        (1000.0, 1.0, [0, 0, 0], [nil, 1, 1]),
        (4.0, 1.0, [0, 100, 250, 250], [nil, 150, nil, 250]),
    ])
    func tokenBucket_takes(rate: Double, burst: Double, instants: [Int], expected: [Int?]) {
        var bucket = TokenBucket(rate: rate, burst: burst)
        let answers = instants.map { bucket.take(now: Self.at($0)).map { Int(($0 / .milliseconds(1)).rounded()) } }
        #expect(answers == expected)
    }

    /// A rate change keeps the tokens earned, up to the new burst; a lower rate makes the next wait longer.
    @Test func tokenBucket_rateChange() {
        var bucket = TokenBucket(rate: 100, burst: 5)
        for _ in 0..<5 {
            let wait = bucket.take(now: Self.at(0))
            #expect(wait == nil)
        }
        bucket.setRate(10, burst: 1, now: Self.at(0))
        let wait = bucket.take(now: Self.at(0))
        #expect(wait.map { Int(($0 / .milliseconds(1)).rounded()) } == 100)
        bucket.setRate(1000, burst: 50, now: Self.at(10))
        #expect(bucket.tokens < 1)
        let later = bucket.take(now: Self.at(20))
        #expect(later == nil)
        #expect(TokenBucket(rate: 0.001, burst: 0).rate == TokenBucket.minimumRate)
    }

    /// A rate of 0 holds (an instance with no share of the budget yet): the bucket starts empty and answers every take
    /// with a wait until the rate is raised; lowered to 0, it gives up the tokens it earned.
    @Test func tokenBucket_zeroHolds() {
        var bucket = TokenBucket(rate: 0, burst: 1)
        #expect(bucket.rate == 0)
        #expect(bucket.take(now: Self.at(0)) == TokenBucket.heldRecheck)
        #expect(bucket.take(now: Self.at(60_000)) == TokenBucket.heldRecheck)
        bucket.setRate(10, burst: 1, now: Self.at(60_000))
        #expect(bucket.take(now: Self.at(60_100)) == nil)
        bucket.setRate(0, burst: 1, now: Self.at(70_000))
        #expect(bucket.take(now: Self.at(70_000)) == TokenBucket.heldRecheck)
    }

    @Test(arguments: [(1.0, 1.0), (20.0, 1.0), (500.0, 5.0), (950.0, 9.5), (1900.0, 19.0), (100_000.0, 20.0)])
    func tokenBucket_burstForRate(rate: Double, burst: Double) {
        #expect(TokenBucket.burst(forRate: rate) == burst)
    }

    /// (the instants of sends in ms, the instant measured at, sends per second).
    @Test(arguments: [
        ([Int](), 1000, 0.0),
        // 100 sends within one slot: over one slot, not over the window.
        (Array(repeating: 10, count: 100), 50, 1000.0),
        // 10 a second for 2 s, measured at 2 s: 20 sends over 2 s.
        (stride(from: 0, to: 2000, by: 100).map { $0 }, 2000, 10.0),
        // Sends older than the window no longer count.
        ([0, 0, 0, 0, 3500], 3600, 10.0),
        (Array(repeating: 0, count: 30), 5000, 0.0),
    ])
    func meter_rate(sends: [Int], measuredAt: Int, expected: Double) {
        var meter = SendRateMeter(origin: Self.start)
        for send in sends { meter.record(now: Self.at(send)) }
        #expect(abs(meter.rate(now: Self.at(measuredAt)) - expected) < 0.01)
    }

    /// Multiplicative decrease: below the measured rate, and below a cap that was already lower.
    @Test(arguments: [
        (1000.0, nil as Double?, 700.0),
        (1000.0, 500.0, 350.0),
        (300.0, 500.0, 210.0),
        (0.0, nil, TokenBucket.minimumRate),
    ])
    func limit_decreased(measured: Double, cap: Double?, expected: Double) {
        #expect(abs(SendRateLimit.decreased(measured: measured, cap: cap) - expected) < 1e-9)
    }

    /// Additive increase: at 95% of the rate that hit the quota after `climb`, ten times slower from there to that rate,
    /// then at the first pace again; lifted at the budget or at twice that rate.
    @Test(arguments: [
        (700.0, 1000.0, 3, nil as Double?, 702.5 as Double?),
        (700.0, 1000.0, 150, nil, 825.0),
        (700.0, 1000.0, 300, nil, 950.0),
        (700.0, 1000.0, 300, 900.0, nil),
        (950.0, 1000.0, 300, nil, 975.0),  // the slow stretch
        (700.0, 1000.0, 900, nil, 1000.0),  // 300 s fast, 600 s slow: back where the quota was met
        (990.0, 1000.0, 300, nil, 1150.0),  // 120 s slow to 1,000, then 180 s at the first pace
        (1990.0, 1000.0, 12, nil, nil),
        (7.0, 10.0, 60, nil, 7.5),
    ])
    func limit_increased(rate: Double, hitRate: Double, seconds: Int, budget: Double?, expected: Double?) {
        let raised = SendRateLimit.increased(rate, hitRate: hitRate, seconds: seconds, budget: budget)
        #expect(raised.map { ($0 * 1000).rounded() / 1000 } == expected)
    }

    static func climb(_ limit: inout SendRateLimit, at milliseconds: Int) -> Bool { limit.climb(now: at(milliseconds)) }

    /// A sequence: budget, quota 429, pause (no climb), resume, climb per whole second, budget change.
    @Test func limit_sequence() {
        var limit = SendRateLimit(budget: 500)
        #expect(limit.cap == 500)
        // Measured over the cap (a burst): the cap is what hit the quota.
        limit.quotaExceeded(measured: 800)
        #expect(limit.cap == 350)
        #expect(limit.hitRate == 500)
        // Paused: no climb until sending resumes.
        #expect(!Self.climb(&limit, at: 60_000))
        limit.resumed(now: Self.at(60_000))
        #expect(!Self.climb(&limit, at: 60_500))
        #expect(Self.climb(&limit, at: 62_500))
        #expect(abs(limit.cap! - (350 + 2 * 500 * 0.25 / 300)) < 1e-9)  // 2 whole seconds at 0.42/s
        // The half second left over counts toward the next step.
        #expect(Self.climb(&limit, at: 63_000))
        #expect(abs(limit.cap! - (350 + 3 * 500 * 0.25 / 300)) < 1e-9)
        // More instances: a smaller share rules.
        limit.setBudget(250)
        #expect(limit.cap == 250)
        #expect(limit.adaptive == nil)
        // No budget: only the adaptive cap, which goes once it climbed to twice the rate that hit the quota.
        var alone = SendRateLimit()
        #expect(alone.cap == nil)
        alone.quotaExceeded(measured: 100)
        #expect(alone.cap == 70)
        alone.resumed(now: Self.at(0))
        #expect(Self.climb(&alone, at: 3_000_000))
        #expect(alone.cap == nil)
    }

    /// The gate's log lines give pauses in seconds to the millisecond, not Duration's nine decimals.
    @Test func pauseInALogLine() {
        #expect(Duration.nanoseconds(12_040_644_506).logSeconds == "12.041s")
        #expect(Duration.seconds(60).logSeconds == "60.000s")
    }
}
