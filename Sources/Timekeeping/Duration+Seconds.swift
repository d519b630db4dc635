/// Conversions of `Duration` for C APIs, SQL parameters and metrics.
extension Duration {
    /// Fractional seconds.
    public var asSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// Whole milliseconds, rounded down, at least 1 for a positive duration (so a short timeout
    /// never becomes 0, which libpq, libcurl and `SET LOCAL statement_timeout` read as "none").
    public var wholeMilliseconds: Int64 {
        let millis = components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
        return millis == 0 && self > .zero ? 1 : millis
    }
}
