import FoundationEssentials
import TextSupport
import Timekeeping

/// Parsers for the settings' value syntax (`config/worker.env`). Each returns nil on bad input; the caller names the
/// variable.
public enum ValueParsing {
    /// The longest duration any setting or option takes (100 years): past it a value is a typo, and the arithmetic
    /// on it (days to seconds, timestamps, SQL intervals) could overflow.
    public static let maxDuration = Duration.seconds(36_500 * 86_400)
    /// `maxDuration` as written.
    public static let maxDurationText = "36500d"

    /// `500ms`, `2s`, `15m`, `6h`, `7d`; a bare integer means seconds. nil on bad syntax or past `maxDuration`.
    public static func duration(_ text: String) -> Duration? {
        guard case .some(let value)? = parsedDuration(text) else { return nil }
        return value
    }

    /// True when `text` is written as a duration but is longer than `maxDuration` (`999999999999999d`): the caller
    /// says "too large" rather than "not a duration".
    public static func durationIsTooLarge(_ text: String) -> Bool {
        guard case .some(nil) = parsedDuration(text) else { return false }
        return true
    }

    /// nil: bad syntax; .some(nil): the syntax is right but the value is past `maxDuration`.
    private static func parsedDuration(_ text: String) -> Duration?? {
        let trimmed = text.trimmingWhitespace()
        let digits = trimmed.prefix { $0.isASCII && $0.isNumber }
        guard !digits.isEmpty else { return nil }
        let unit: Int64  // milliseconds
        switch trimmed.dropFirst(digits.count) {
        case "", "s": unit = 1000
        case "ms": unit = 1
        case "m": unit = 60_000
        case "h": unit = 3_600_000
        case "d": unit = 86_400_000
        default: return nil
        }
        // Digits that do not fit an Int64, or that overflow once converted to milliseconds, are too large as well.
        guard let value = Int64(digits) else { return .some(nil) }
        let (milliseconds, overflow) = value.multipliedReportingOverflow(by: unit)
        guard !overflow, Duration.milliseconds(milliseconds) <= maxDuration else { return .some(nil) }
        return .some(.milliseconds(milliseconds))
    }

    /// A non-negative decimal integer without sign or unit.
    public static func integer(_ text: String) -> Int? {
        let trimmed = text.trimmingWhitespace()
        guard !trimmed.isEmpty, trimmed.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(trimmed)
    }

    /// `host:port` or `[v6]:port`, port 0–65535; host is an IP literal or a name.
    public static func hostPort(_ text: String) -> (host: String, port: UInt16)? {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-:".contains($0)) }),
              let port = integer(String(portText)), port <= 65_535 else { return nil }
        return (String(host), UInt16(port))
    }

    /// An absolute `http://` or `https://` URL with a host, without a trailing slash.
    public static func baseURL(_ text: String) -> String? {
        // https only (credentials and tokens travel in these requests), a host, an optional port, nothing
        // else: the worker appends the API's own paths, so a path prefix, query or fragment could only
        // be a mistake that routes every send somewhere unexpected.
        guard let url = URL(string: text), url.scheme?.lowercased() == "https", let host = url.host, !host.isEmpty,
              url.query == nil, url.fragment == nil, url.user == nil, url.password == nil,
              url.path.isEmpty || url.path == "/" else { return nil }
        return text.hasSuffix("/") ? String(text.dropLast()) : text
    }

    /// What is wrong with a proxy URL as libcurl reads it (`[scheme://][user:password@]host[:port][/]`, the schemes
    /// libcurl speaks), or nil when nothing is.
    public static func proxyProblem(_ text: String) -> String? {
        let schemes = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]
        let form = "must be a proxy URL such as http://host:port ([scheme://][user:password@]host[:port])"
        var rest = Substring(text)
        if let separator = rest.firstRange(of: "://") {
            let scheme = rest[..<separator.lowerBound].lowercased()
            guard schemes.contains(scheme) else {
                return "names the scheme \"\(scheme.prefix(16))\", which libcurl does not speak to a proxy (it speaks \(schemes.map { $0 + "://" }.joined(separator: ", ")))"
            }
            rest = rest[separator.upperBound...]
        }
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        let host: Substring
        var port: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return form }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return form }
                port = after.dropFirst()
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { return form }
        } else {
            if let colon = rest.firstIndex(of: ":") {
                host = rest[..<colon]
                port = rest[rest.index(after: colon)...]
            } else {
                host = rest
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == "_") }) else {
                return form
            }
        }
        if let port {
            guard let number = integer(String(port)), (1...65_535).contains(number) else { return form }
        }
        return nil
    }

    /// Renders a duration the way the settings are written (`24h`, `90s`, `250ms`).
    public static func format(_ duration: Duration) -> String {
        let millis = duration.wholeMilliseconds
        if millis % 1000 != 0 { return "\(millis)ms" }
        let seconds = millis / 1000
        if seconds != 0, seconds % 86_400 == 0 { return "\(seconds / 86_400)d" }
        if seconds != 0, seconds % 3600 == 0 { return "\(seconds / 3600)h" }
        if seconds != 0, seconds % 60 == 0 { return "\(seconds / 60)m" }
        return "\(seconds)s"
    }

    /// A conninfo string or URI with any password replaced by `***`, and libpq's complaints about one without what
    /// they quote (`SecretRedaction.conninfo`: the same redaction for check-config, the journal and `/readyz`).
    public static func redactConninfo(_ text: String) -> String { SecretRedaction.conninfo(text) }

    /// A URL-like setting's value without its credentials, with or without a scheme (`SecretRedaction.setting`).
    public static func redactSetting(_ value: String) -> String { SecretRedaction.setting(value) }
}
