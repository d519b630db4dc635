/// Text helpers the daemon needs from Foundation's string API, kept here so no module links full Foundation.
extension StringProtocol {
    /// Without leading and trailing whitespace (Unicode's White_Space: spaces, tabs, newlines).
    public func trimmingWhitespace() -> String {
        guard let first = firstIndex(where: { !$0.isWhitespace }) else { return "" }
        let last = lastIndex(where: { !$0.isWhitespace })!
        return String(self[first...last])
    }
}

extension BinaryInteger {
    /// The number in decimal, zero-padded to `width` digits (a sign stays in front).
    public func zeroPadded(_ width: Int) -> String {
        let digits = String(self.magnitude)
        let padded = String(repeating: "0", count: max(0, width - digits.count)) + digits
        return self < 0 ? "-" + padded : padded
    }
}

extension Double {
    /// The value rounded half away from zero to `decimals` places and written with exactly that many (as `%.Nf`).
    public func fixed(_ decimals: Int) -> String {
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (abs(self) * scale).rounded(.toNearestOrAwayFromZero)
        guard scaled < 9.0e15 else { return "\(self)" }
        let whole = Int64(scaled)
        let integer = whole / Int64(scale)
        let fraction = whole % Int64(scale)
        let sign = self < 0 && whole != 0 ? "-" : ""
        return decimals == 0 ? "\(sign)\(integer)" : "\(sign)\(integer).\(fraction.zeroPadded(decimals))"
    }
}
