import Crypto
import Foundation
import HTTPServer
import Synchronization
import TestSupport

/// A loopback App Store Server API over TLS: checks the client's ES256 JWT the way Apple does, then answers
/// Get Transaction Info per transaction id (signed transaction, 404 errorCode 4040010, 429 with Retry-After in UNIX ms,
/// a status, or a stall) and Get Notification History (pages of 20, pagination tokens, Apple's date-range and
/// notificationType checks, signed payloads). Every request's arrival is recorded for rate checks.
final class FakeAppStore: Sendable {
    enum Answer: Sendable {
        case signed(String)
        case notFound
        /// 400 errorCode 4000006, as Apple answers a transaction id that is not valid.
        case invalidTransactionId
        case rateLimited(retryAtMillis: Int64)
        case status(Int)
        /// Holds the request until `stop()` (or 30 s): a lookup in flight when the worker is told to stop.
        case stall
    }

    /// One Get Notification History call as received.
    struct HistoryQuery: Sendable, Equatable {
        var startMillis: Int64
        var endMillis: Int64
        var type: String?
        var paginationToken: String?
    }

    private struct Recorded {
        var type: String
        var atMillis: Int64
        var signedPayload: String
    }

    private struct State {
        var answers: [String: Answer] = [:]
        var requestedIds: [String] = []
        var refusedTokens = 0
        var arrivals: [ContinuousClock.Instant] = []
        var notifications: [Recorded] = []
        var tokens: [String: (query: HistoryQuery, offset: Int)] = [:]
        var queries: [HistoryQuery] = []
        var historyFailure: Int?
        var historyFailAfter = 0
        /// Notification types whose history queries answer this status (Apple failing one query of a round).
        var historyFailingTypes: [String: Int] = [:]
        var stalled = 0
        var stopping = false
        var refusingAll = false
    }

    private let state = Mutex(State())
    /// Set once at the end of `init` (its handler needs `self`).
    private let server = Mutex<HTTPServer?>(nil)
    let apiPublicKey: PublicKey
    let keyId: String
    let issuerId: String
    let bundleId: String
    /// Days of history Apple keeps (180 production, 30 sandbox).
    let historyDays: Int64
    static let pageSize = 20

    /// Broadcast by `stop()`: it releases every request held by `.stall`.
    private let stopped = NSCondition()

    init(apiPublicKeyPEM: String, keyId: String, issuerId: String, bundleId: String, historyDays: Int64 = 180) throws {
        apiPublicKey = try PublicKey(pem: apiPublicKeyPEM)
        self.keyId = keyId
        self.issuerId = issuerId
        self.bundleId = bundleId
        self.historyDays = historyDays
        let fixtures = TLSFixtures.shared
        let server = try HTTPServer(tls: TLSIdentity(certificatePEM: fixtures.serverCertificatePEM, privateKeyPEM: fixtures.serverKeyPEM)) {
            [unowned self] request in self.handle(request)
        }
        self.server.withLock { $0 = server }
    }

    var baseURL: String { "https://127.0.0.1:\(server.withLock { $0!.port })" }
    var requests: [String] { state.withLock { $0.requestedIds } }
    var refused: Int { state.withLock { $0.refusedTokens } }
    /// When each authenticated request arrived (lookups and history).
    var arrivalTimes: [ContinuousClock.Instant] { state.withLock { $0.arrivals } }
    var historyQueries: [HistoryQuery] { state.withLock { $0.queries } }
    /// Requests currently held by `.stall`.
    var stalledNow: Int { state.withLock { $0.stalled } }

    func answer(_ transactionId: String, _ answer: Answer) { state.withLock { $0.answers[transactionId] = answer } }

    /// Apple records a notification (it shows in the history from `atMillis`, default now).
    func record(_ type: String, signedPayload: String, atMillis: Int64? = nil) {
        let at = atMillis ?? Int64(Date().timeIntervalSince1970 * 1000)
        state.withLock { $0.notifications.append(Recorded(type: type, atMillis: at, signedPayload: signedPayload)) }
    }

    /// Makes history calls answer `status` once `after` more have been answered normally (nil: answer normally again).
    func failHistory(with status: Int?, after: Int = 0) {
        state.withLock {
            $0.historyFailure = status
            $0.historyFailAfter = $0.queries.count + after
        }
    }

    /// Makes the history queries for `type` answer `status` (nil: answer normally again); other types are answered.
    func failHistory(type: String, with status: Int?) {
        state.withLock { $0.historyFailingTypes[type] = status }
    }

    /// Answers 401 to every request, as Apple does to a revoked key (until called with false).
    func refuseAll(_ refuse: Bool = true) { state.withLock { $0.refusingAll = refuse } }

    func stop() {
        state.withLock { $0.stopping = true }
        stopped.lock()
        stopped.broadcast()
        stopped.unlock()
        server.withLock { $0 }?.stop()
    }

    private func handle(_ request: HTTPServerRequest) -> HTTPServerResponse {
        guard let auth = request.headers["authorization"], auth.hasPrefix("Bearer "), verifyJWT(String(auth.dropFirst(7))),
              !state.withLock({ $0.refusingAll }) else {
            state.withLock { $0.refusedTokens += 1 }
            return HTTPServerResponse(status: 401, body: Array("Unauthenticated".utf8))
        }
        state.withLock { $0.arrivals.append(.now) }
        if request.method == "POST", request.path == "/inApps/v1/notifications/history" { return history(request) }
        let prefix = "/inApps/v1/transactions/"
        guard request.method == "GET", request.path.hasPrefix(prefix) else { return .json(404, #"{"errorCode":4040000}"#) }
        let id = String(request.path.dropFirst(prefix.count))
        let answer = state.withLock { state -> Answer? in
            state.requestedIds.append(id)
            return state.answers[id]
        }
        switch answer {
        case .signed(let jws)?: return .json(200, #"{"signedTransactionInfo":"\#(jws)"}"#)
        case .rateLimited(let millis)?:
            return .json(429, #"{"errorCode":4290000,"errorMessage":"Rate limit exceeded."}"#, headers: ["Retry-After": "\(millis)"])
        case .status(let status)?: return .json(status, #"{"errorCode":5000000,"errorMessage":"An unknown error occurred."}"#)
        case .invalidTransactionId?: return .json(400, #"{"errorCode":4000006,"errorMessage":"Invalid transaction id."}"#)
        case .stall?:
            state.withLock { $0.stalled += 1 }
            // On the HTTP server's connection thread: until `stop()`, for at most 30 s.
            let deadline = Date().addingTimeInterval(30)
            stopped.lock()
            while !state.withLock({ $0.stopping }), stopped.wait(until: deadline) {}
            stopped.unlock()
            state.withLock { $0.stalled -= 1 }
            return .json(500, #"{"errorCode":5000000,"errorMessage":"An unknown error occurred."}"#)
        case .notFound?, nil: return .json(404, #"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#)
        }
    }

    /// Apple's notificationType values (App Store Server Notifications V2); any other is refused as Apple does (4000018).
    static let notificationTypes: Set<String> = [
        "CONSUMPTION_REQUEST", "DID_CHANGE_RENEWAL_PREF", "DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW", "DID_RENEW", "EXPIRED",
        "EXTERNAL_PURCHASE_TOKEN", "GRACE_PERIOD_EXPIRED", "METADATA_UPDATE", "MIGRATION", "OFFER_REDEEMED", "ONE_TIME_CHARGE",
        "PRICE_CHANGE", "PRICE_INCREASE", "REFUND", "REFUND_DECLINED", "REFUND_REVERSED", "RENEWAL_EXTENDED", "RENEWAL_EXTENSION",
        "RESCIND_CONSENT", "REVOKE", "SUBSCRIBED", "TEST",
    ]

    /// Get Notification History with Apple's checks and error codes.
    private func history(_ request: HTTPServerRequest) -> HTTPServerResponse {
        func bad(_ code: Int, _ message: String) -> HTTPServerResponse { .json(400, #"{"errorCode":\#(code),"errorMessage":"\#(message)"}"#) }
        guard let body = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
            return bad(4_000_000, "An error that indicates an invalid request.")
        }
        guard let start = (body["startDate"] as? NSNumber)?.int64Value else { return bad(4_000_015, "Invalid request. The start date is not a timestamp value represented in milliseconds.") }
        guard let end = (body["endDate"] as? NSNumber)?.int64Value else { return bad(4_000_016, "Invalid request. The end date is not a timestamp value represented in milliseconds.") }
        let type = body["notificationType"] as? String
        let query = HistoryQuery(startMillis: start, endMillis: end, type: type, paginationToken: request.query["paginationToken"])
        let nowMillis = Int64(Date().timeIntervalSince1970 * 1000)
        return state.withLock { state -> HTTPServerResponse in
            state.queries.append(query)
            if let status = state.historyFailure, state.queries.count > state.historyFailAfter { return .json(status, #"{"errorCode":5000000,"errorMessage":"An unknown error occurred."}"#) }
            guard start < end else { return bad(4_000_013, "Invalid request. The end date precedes the start date or the dates are the same.") }
            guard start >= nowMillis - historyDays * 86_400_000 else { return bad(4_000_012, "Invalid request. The start date is earlier than the allowed start date.") }
            // This fake insists on one notificationType per query (the worker makes one query per type), one Apple knows,
            // and no transactionId with it.
            guard let type, Self.notificationTypes.contains(type), body["transactionId"] == nil else {
                return bad(4_000_018, "Invalid request. The notification type or subtype is invalid.")
            }
            if let status = state.historyFailingTypes[type] { return .json(status, #"{"errorCode":5000000,"errorMessage":"An unknown error occurred."}"#) }
            var offset = 0
            if let token = query.paginationToken {
                guard let saved = state.tokens[token], saved.query.startMillis == start, saved.query.endMillis == end, saved.query.type == type else {
                    return bad(4_000_014, "Invalid request. The pagination token is invalid.")
                }
                offset = saved.offset
            }
            let effectiveEnd = min(end, nowMillis)
            let matching = state.notifications.filter { $0.type == type && $0.atMillis >= start && $0.atMillis < effectiveEnd }.sorted { $0.atMillis < $1.atMillis }
            let page = matching.dropFirst(offset).prefix(Self.pageSize)
            let hasMore = offset + page.count < matching.count
            var response: [String: Any] = [
                "notificationHistory": page.map { ["signedPayload": $0.signedPayload,
                                                   "sendAttempts": [["attemptDate": $0.atMillis, "sendAttemptResult": "SUCCESS"]]] },
                "hasMore": hasMore,
            ]
            if hasMore {
                let token = UUID().uuidString
                state.tokens[token] = (HistoryQuery(startMillis: start, endMillis: end, type: type, paginationToken: nil), offset + page.count)
                response["paginationToken"] = token
            }
            let data = (try? JSONSerialization.data(withJSONObject: response)) ?? Data()
            return .json(200, String(decoding: data, as: UTF8.self))
        }
    }

    /// Apple's checks: ES256 signature by the registered key, kid, typ, iss, aud, bid, exp ≤ 60 minutes after iat.
    func verifyJWT(_ token: String) -> Bool {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let h = Base64URL.decode(parts[0]), let c = Base64URL.decode(parts[1]), let s = Base64URL.decode(parts[2]),
              let header = (try? JSONSerialization.jsonObject(with: h)) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: c)) as? [String: Any],
              let der = try? ECDSASignature.rawToDer(Array(s)) else { return false }
        guard header["alg"] as? String == "ES256", header["kid"] as? String == keyId, header["typ"] as? String == "JWT",
              claims["iss"] as? String == issuerId, claims["aud"] as? String == "appstoreconnect-v1", claims["bid"] as? String == bundleId,
              let iat = (claims["iat"] as? NSNumber)?.doubleValue, let exp = (claims["exp"] as? NSNumber)?.doubleValue,
              exp > Date().timeIntervalSince1970, exp - iat <= 3600 else { return false }
        return apiPublicKey.verifySHA256(signature: der, data: Array("\(parts[0]).\(parts[1])".utf8))
    }
}
