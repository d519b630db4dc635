/// Capped exponential backoff with jitter: the one backoff of the worker (retries of events,
/// reconnects, claim failures, FCM pauses).
public struct Backoff: Sendable {
    public var base: Duration
    public var cap: Duration

    public init(base: Duration = .seconds(2), cap: Duration = .seconds(900)) {
        self.base = base
        self.cap = cap
    }

    /// The delay before attempt `attempt + 1`: base·2^(attempt−1), capped, scaled by a random factor in [0.5, 1.0]
    /// so that messages failing together do not retry together.
    public func delay(afterAttempt attempt: Int, jitter: Double = Double.random(in: 0.5...1.0)) -> Duration {
        let exponent = Double(max(0, min(attempt - 1, 30)))
        let raw = min(cap.asSeconds, base.asSeconds * pow2(exponent))
        return .milliseconds(Int64((raw * jitter * 1000).rounded()))
    }

    /// A jitter factor in [0.5, 1.0] spread over `seed` (SplitMix64): for delays computed on a hot path for every
    /// item (the engine prices a retry for every settled event), where the system generator would cost a system
    /// call each. Different seeds (event id and attempt) land apart, which is all the jitter is for.
    public static func jitter(seed: UInt64) -> Double {
        var z = seed &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return 0.5 + 0.5 * Double(z >> 11) / Double(1 << 53)
    }

    private func pow2(_ value: Double) -> Double {
        var result = 1.0
        for _ in 0..<Int(value) { result *= 2 }
        return result
    }
}
