import Crypto
import FoundationEssentials
import JSON
import HTTP
import Logging
import Metrics
import Synchronization

/// OAuth2 access tokens for FCM from a service account (RFC 7523 JWT bearer grant). Cached and refreshed in
/// the background from `refreshMargin` before expiry (half its life for a token that lives less than twice
/// that), so no send waits for Google while the token it has is still good and no send causes a fetch of its
/// own; one refresh is shared by every concurrent caller. A refused or unanswered token request is
/// backed off (6 s, 12 s, 24 s, … 60 s: never more than 10 a minute), and `onStatus` tells readiness why.
public actor AccessTokenProvider {
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// Refresh in the background from this long before the token expires (at most half its life).
    public static let refreshMargin: TimeInterval = 300
    /// A token with less than this left is not used: callers wait for a new one (at most a quarter of its life).
    public static let expiryMargin: TimeInterval = 60

    /// The margins for a token that lives `lifetime` seconds: Google's hour-long tokens get the full margins; a
    /// short-lived one (a proxy, an emulator, a workload-identity broker) is refreshed halfway through its life
    /// and used until its last quarter, never "due for refresh" from the moment it arrives.
    public static func margins(lifetime: TimeInterval) -> (refresh: TimeInterval, expiry: TimeInterval) {
        (min(refreshMargin, lifetime / 2), min(expiryMargin, lifetime / 4))
    }

    /// A cached token, when it expires and its margins.
    struct Cached: Sendable {
        var token: String
        var expiresAt: Date
        var refreshMargin: TimeInterval
        var expiryMargin: TimeInterval

        init(token: String, expiresAt: Date, lifetime: TimeInterval) {
            self.token = token
            self.expiresAt = expiresAt
            (refreshMargin, expiryMargin) = AccessTokenProvider.margins(lifetime: lifetime)
        }
    }
    /// Waits between failed token requests: 6 s doubling to 60 s.
    public static let failureBackoff = (first: 6.0, cap: 60.0)

    /// What the token endpoint last said, for `/readyz` `fcm_credentials`.
    public enum Status: Sendable, Equatable {
        case ok
        /// Refused (Google's `error` and `error_description`) or not answered.
        case failing(String)
    }

    private let account: ServiceAccount
    private let http: HTTPClient
    private let now: @Sendable () -> Date
    private let refreshes: Counter
    private let requests: Counter
    private let logger: Logger
    private let onStatus: @Sendable (Status) -> Void
    private var cached: Cached? {
        didSet { current.withLock { $0 = cached } }
    }
    /// The cached token, readable without hopping onto the actor (every send reads it).
    private nonisolated let current = Mutex<Cached?>(nil)
    /// A background refresh has been started and not finished.
    private nonisolated let refreshing = Mutex(false)
    private var inFlight: Task<Cached, any Error>?
    /// The last failure and when the next request may go out.
    private var failure: (error: any Error, attempts: Int, retryAt: Date)?

    /// `now` is injectable so tests move time without sleeping.
    public init(account: ServiceAccount, http: HTTPClient, metrics: MetricsRegistry, logger: Logger,
                now: @escaping @Sendable () -> Date = Date.init, onStatus: @escaping @Sendable (Status) -> Void = { _ in }) {
        self.account = account
        self.http = http
        self.now = now
        self.logger = logger
        self.onStatus = onStatus
        refreshes = metrics.counter("fcm_token_refreshes_total", help: "OAuth access tokens fetched for FCM.")
        requests = metrics.counter("fcm_token_requests_total", help: "Requests made to the OAuth token endpoint, answered or not.")
    }

    /// A valid access token: the cached one while it has more than its expiry margin left, else a new one.
    public nonisolated func token() async throws -> String {
        if let fresh = cachedToken() { return fresh }
        return try await refreshedToken(force: false)
    }

    /// The cached token while it has more than its expiry margin left; nil when callers must wait for a fetch.
    /// From its refresh margin before expiry, it starts one background refresh (and keeps answering with the old
    /// token). No suspension.
    public nonisolated func cachedToken() -> String? {
        guard let fresh = current.withLock({ $0 }) else { return nil }
        let left = fresh.expiresAt.timeIntervalSince(now())
        guard left > fresh.expiryMargin else { return nil }
        if left <= fresh.refreshMargin, refreshing.withLock({ started in defer { started = true }; return !started }) {
            Task { await self.refreshInBackground() }
        }
        return fresh.token
    }

    private func refreshInBackground() async {
        do {
            _ = try await refreshedToken(force: true)
        } catch {
            // The flag stays set until the next request may go out, so sends meanwhile do not each start a refresh.
            if let retryAt = failure?.retryAt { try? await Task.sleep(for: .seconds(max(0, retryAt.timeIntervalSince(now())))) }
        }
        refreshing.withLock { $0 = false }
    }

    /// A new token unless one with more than its refresh margin left is cached (or, `force` false, its expiry margin).
    private func refreshedToken(force: Bool) async throws -> String {
        if let cached, cached.expiresAt.timeIntervalSince(now()) > (force ? cached.refreshMargin : cached.expiryMargin) { return cached.token }
        if let inFlight { return try await inFlight.value.token }
        if let failure, now() < failure.retryAt { throw failure.error }
        let task = Task { try await self.fetch() }
        inFlight = task
        defer { inFlight = nil }
        do {
            let fetched = try await task.value
            cached = fetched
            if failure != nil {
                logger.notice("the OAuth token endpoint accepts the service account again")
                failure = nil
            }
            onStatus(.ok)
            return fetched.token
        } catch {
            let attempts = (failure?.attempts ?? 0) + 1
            let wait = min(Self.failureBackoff.cap, Self.failureBackoff.first * Double(1 << min(attempts - 1, 10)))
            failure = (error, attempts, now().addingTimeInterval(wait))
            if attempts == 1 { logger.error("the OAuth token endpoint refuses the service account or does not answer", metadata: ["error": "\(error)"]) }
            onStatus(.failing("\(error)"))
            throw error
        }
    }

    /// Drops the cached token if it is still `token` (after FCM answered 401 for it).
    public func invalidate(_ token: String) {
        if cached?.token == token { cached = nil }
    }

    private func fetch() async throws -> Cached {
        let issuedAt = now()
        struct Header: Encodable { let alg = "RS256", typ = "JWT", kid: String? }
        struct Claims: Encodable { let iss: String, scope: String, aud: String, iat: Int, exp: Int }
        let assertion = try JWT.sign(
            header: Header(kid: account.privateKeyId),
            claims: Claims(iss: account.clientEmail, scope: Self.scope, aud: account.tokenURI,
                           iat: Int(issuedAt.timeIntervalSince1970), exp: Int(issuedAt.timeIntervalSince1970) + 3600),
            key: account.privateKey)
        let form = "grant_type=" + formEncode("urn:ietf:params:oauth:grant-type:jwt-bearer") + "&assertion=" + formEncode(assertion)
        let response: HTTPResponse
        requests.increment()
        do {
            response = try await http.execute(HTTPRequest(method: .post, url: account.tokenURI,
                                                          headers: ["Content-Type": "application/x-www-form-urlencoded"],
                                                          body: Array(form.utf8), timeout: .seconds(15)))
        } catch {
            throw FCMError(.tokenRequestFailed, "token endpoint \(account.tokenURI): \(error)")
        }
        let object = JSONValue.parse(bytes: response.body)
        guard response.status == 200, let token = object?["access_token"]?.stringValue, !token.isEmpty else {
            // Google's OAuth errors: {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}.
            let reason = [object?["error"]?.stringValue, object?["error_description"]?.stringValue].compactMap { $0 }.joined(separator: ": ")
                .nonEmpty ?? "no access_token in the answer"
            throw FCMError(.tokenRequestFailed, "token endpoint \(account.tokenURI) answered \(response.status): \(reason.prefix(200))")
        }
        let lifetime = object?["expires_in"]?.numberValue ?? 3600
        refreshes.increment()
        logger.debug("fetched FCM access token", metadata: ["fcm.token_lifetime_s": "\(Int(lifetime))"])
        return Cached(token: token, expiresAt: issuedAt.addingTimeInterval(lifetime), lifetime: lifetime)
    }

    private func formEncode(_ value: String) -> String { PercentEncoding.component(value) }
}

private extension String {
    var nonEmpty: String? { isEmpty ? nil : self }
}
