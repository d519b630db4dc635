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

    private func pow2(_ value: Double) -> Double {
        var result = 1.0
        for _ in 0..<Int(value) { result *= 2 }
        return result
    }
}
