import Crypto
import Foundation
import HTTP
import Logging
import Metrics
import Synchronization

/// OAuth2 access tokens for FCM from a service account (RFC 7523 JWT bearer grant). Cached,
/// refreshed a few minutes before expiry, one refresh shared by every concurrent caller.
public actor AccessTokenProvider {
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// Refresh this long before the token expires.
    public static let refreshMargin: TimeInterval = 300

    private let account: ServiceAccount
    private let http: HTTPClient
    private let now: @Sendable () -> Date
    private let refreshes: Counter
    private let logger: Logger
    private var cached: (token: String, expiresAt: Date)? {
        didSet { current.withLock { $0 = cached } }
    }
    /// The cached token, readable without hopping onto the actor (every send reads it).
    private nonisolated let current = Mutex<(token: String, expiresAt: Date)?>(nil)
    private var inFlight: Task<(String, Date), any Error>?

    /// `now` is injectable so tests move time without sleeping.
    public init(account: ServiceAccount, http: HTTPClient, metrics: MetricsRegistry, logger: Logger,
                now: @escaping @Sendable () -> Date = Date.init) {
        self.account = account
        self.http = http
        self.now = now
        self.logger = logger
        refreshes = metrics.counter("fcm_token_refreshes_total", help: "OAuth access tokens fetched for FCM.")
    }

    /// A valid access token, fetched only when none is cached or it is about to expire.
    public nonisolated func token() async throws -> String {
        if let fresh = cachedToken() { return fresh }
        return try await refreshedToken()
    }

    /// The cached token when it is not due for refresh; nil when a fetch is needed. No suspension.
    public nonisolated func cachedToken() -> String? {
        guard let fresh = current.withLock({ $0 }), fresh.expiresAt.timeIntervalSince(now()) > Self.refreshMargin else { return nil }
        return fresh.token
    }

    private func refreshedToken() async throws -> String {
        if let cached, cached.expiresAt.timeIntervalSince(now()) > Self.refreshMargin { return cached.token }
        if let inFlight { return try await inFlight.value.0 }
        let task = Task { try await self.fetch() }
        inFlight = task
        defer { inFlight = nil }
        let (token, expiresAt) = try await task.value
        cached = (token, expiresAt)
        return token
    }

    /// Drops the cached token if it is still `token` (after FCM answered 401 for it).
    public func invalidate(_ token: String) {
        if cached?.token == token { cached = nil }
    }

    private func fetch() async throws -> (String, Date) {
        let issuedAt = now()
        let assertion = try JWT.sign(
            header: ["alg": "RS256", "typ": "JWT"].merging(account.privateKeyId.map { ["kid": $0] } ?? [:]) { $1 },
            claims: ["iss": account.clientEmail, "scope": Self.scope, "aud": account.tokenURI,
                     "iat": Int(issuedAt.timeIntervalSince1970), "exp": Int(issuedAt.timeIntervalSince1970) + 3600],
            key: account.privateKey)
        let form = "grant_type=" + formEncode("urn:ietf:params:oauth:grant-type:jwt-bearer") + "&assertion=" + formEncode(assertion)
        let response: HTTPResponse
        do {
            response = try await http.execute(HTTPRequest(method: .post, url: account.tokenURI,
                                                          headers: ["Content-Type": "application/x-www-form-urlencoded"],
                                                          body: Array(form.utf8), timeout: .seconds(15)))
        } catch {
            throw FCMError(.tokenRequestFailed, "token endpoint \(account.tokenURI): \(error)")
        }
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any]
        guard response.status == 200, let token = object?["access_token"] as? String, !token.isEmpty else {
            let reason = (object?["error_description"] as? String) ?? (object?["error"] as? String) ?? "no access_token in the answer"
            throw FCMError(.tokenRequestFailed, "token endpoint \(account.tokenURI) answered \(response.status): \(reason.prefix(200))")
        }
        let lifetime = (object?["expires_in"] as? NSNumber)?.doubleValue ?? 3600
        refreshes.increment()
        logger.debug("fetched FCM access token", metadata: ["fcm.token_lifetime_s": "\(Int(lifetime))"])
        return (token, issuedAt.addingTimeInterval(lifetime))
    }

    private func formEncode(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}
