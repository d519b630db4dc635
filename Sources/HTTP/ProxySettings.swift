import Glibc

/// The proxy settings of the process's environment, read once at start, in libcurl's own order (its
/// `detect_proxy`): `http_proxy` for http (lower case only), `<scheme>_proxy` then `<SCHEME>_PROXY` otherwise,
/// then `all_proxy`, `ALL_PROXY`; hosts in `no_proxy` (or `NO_PROXY`) go direct.
///
/// Left to itself libcurl reads them on every transfer: 12 `curl_getenv` calls per FCM send (counted with a
/// uprobe over `scripts/bench-sender`). Given explicitly (`CURLOPT_PROXY`, "" for none, and `CURLOPT_NOPROXY`),
/// it reads none; an operator's proxy still applies, as it would have, from the environment the daemon started with.
struct ProxySettings: Equatable {
    /// A proxy URL and the variable it came from (for messages).
    struct Proxy: Equatable {
        var url: String
        var variable: String

        /// Whether libcurl's message names this proxy's address ("Failed to connect to squid port 3128 after …").
        func isNamed(in message: String) -> Bool {
            var rest = Substring(url)
            if let scheme = rest.firstRange(of: "://") { rest = rest[scheme.upperBound...] }
            if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
            if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
            var host = rest, port: Substring?
            if let close = rest.lastIndex(of: "]") {
                host = rest[...close]
                if rest[close...].count > 1 { port = rest[rest.index(close, offsetBy: 2)...] }
            } else if let colon = rest.lastIndex(of: ":") {
                host = rest[..<colon]
                port = rest[rest.index(after: colon)...]
            }
            let hostName = host.hasPrefix("[") ? host.dropFirst().dropLast() : host
            guard !hostName.isEmpty else { return false }
            return message.contains("to \(hostName) port \(port.map { "\($0) " } ?? "")")
        }
    }

    var byScheme: [String: Proxy]
    var fallback: Proxy?
    var noProxy: String

    init(environment: [String: String]) {
        func first(_ names: String...) -> Proxy? {
            names.lazy.compactMap { name in environment[name].flatMap { $0.isEmpty ? nil : Proxy(url: $0, variable: name) } }.first
        }
        byScheme = [:]
        for scheme in ["http", "https"] {
            let value = scheme == "http" ? first("http_proxy") : first("\(scheme)_proxy", "\(scheme.uppercased())_PROXY")
            if let value { byScheme[scheme] = value }
        }
        fallback = first("all_proxy", "ALL_PROXY")
        noProxy = (first("no_proxy", "NO_PROXY")?.url) ?? ""
    }

    /// The proxy for `url` ("" for none).
    func proxy(for url: String) -> String { source(for: url)?.url ?? "" }

    /// The proxy for `url` and its variable; nil for none. (`NO_PROXY` is libcurl's to apply.)
    func source(for url: String) -> Proxy? {
        guard let colon = url.firstIndex(of: ":") else { return fallback }
        return byScheme[url[..<colon].lowercased()] ?? fallback
    }

    /// Some proxy is reached over TLS (`https://`): a connection through it runs TLS inside TLS.
    var hasTLSProxy: Bool {
        (Array(byScheme.values) + [fallback].compactMap { $0 }).contains { $0.url.lowercased().hasPrefix("https://") }
    }

    /// The environment this process started with.
    static let process: ProxySettings = {
        var environment: [String: String] = [:]
        for name in ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"] {
            if let value = getenv(name) { environment[name] = String(cString: value) }
        }
        return ProxySettings(environment: environment)
    }()
}
