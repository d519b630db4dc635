import Glibc

/// The proxy settings of the process's environment, read once at start, in libcurl's own order (its
/// `detect_proxy`): `http_proxy` for http (lower case only), `<scheme>_proxy` then `<SCHEME>_PROXY` otherwise,
/// then `all_proxy`, `ALL_PROXY`; hosts in `no_proxy` (or `NO_PROXY`) go direct.
///
/// Left to itself libcurl reads them on every transfer: 12 `curl_getenv` calls per FCM send (counted with a
/// uprobe over `scripts/bench-sender`). Given explicitly (`CURLOPT_PROXY`, "" for none, and `CURLOPT_NOPROXY`),
/// it reads none; an operator's proxy still applies, as it would have, from the environment the daemon started with.
struct ProxySettings: Equatable {
    var byScheme: [String: String]
    var fallback: String
    var noProxy: String

    init(environment: [String: String]) {
        func first(_ names: String...) -> String? { names.lazy.compactMap { environment[$0] }.first { !$0.isEmpty } }
        byScheme = [:]
        for scheme in ["http", "https"] {
            let value = scheme == "http" ? first("http_proxy") : first("\(scheme)_proxy", "\(scheme.uppercased())_PROXY")
            if let value { byScheme[scheme] = value }
        }
        fallback = first("all_proxy", "ALL_PROXY") ?? ""
        noProxy = first("no_proxy", "NO_PROXY") ?? ""
    }

    /// The proxy for `url` ("" for none).
    func proxy(for url: String) -> String {
        guard let colon = url.firstIndex(of: ":") else { return fallback }
        return byScheme[url[..<colon].lowercased()] ?? fallback
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
