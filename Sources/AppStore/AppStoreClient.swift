import Crypto
import FoundationEssentials
import JSON

/// The App Store Server API environments Apple answers for, each with its own base URL, rate and pause.
/// (A row's `environment` column may hold others, such as `Xcode`, which Apple never signs.)
public enum AppStoreEnvironment: String, Sendable, CaseIterable {
    case production = "Production"
    case sandbox = "Sandbox"
}
import HTTP
import Synchronization

/// App Store Server API settings.
public struct AppStoreConfiguration: Sendable {
    public var issuerId: String
    public var keyId: String
    public var bundleId: String
    /// The `.p8` key (ES256).
    public var privateKey: PrivateKey
    public var roots: [Certificate]
    public var productionURL: String
    public var sandboxURL: String
    /// Each entitlement is checked again this long after its last successful check (less up to a tenth, to spread).
    public var recheckInterval: Duration
    /// Requests per second per environment, spread evenly (lookups and notification history together). The
    /// daemon's settings keep them within Apple's 50/s (5/s sandbox); tests and the benchmark may go higher.
    public var productionRate: Double = 20
    public var sandboxRate: Double = 2
    /// A failed lookup waits this long, doubling per consecutive failure, up to `failureBackoffCap` (nil: the interval).
    public var failureBackoff: Duration = .seconds(60)
    public var failureBackoffCap: Duration?
    /// After Apple refuses our key (401) an environment pauses this long, doubling per refusal up to 5 minutes.
    public var keyRefusedBackoff: Duration = .seconds(15)
    /// How long a claimed row stays out of other claims before it is due again (a crash mid-pass).
    public var claimLease: Duration = .seconds(600)
    /// Get Notification History for REFUND / REVOKE / REFUND_REVERSED (`APPSTORE_NOTIFICATION_HISTORY=on`).
    public var notificationHistory = false
    public var notificationPollInterval: Duration = .seconds(300)
    public var http: HTTPClientConfiguration

    public init(issuerId: String, keyId: String, bundleId: String, privateKey: PrivateKey, roots: [Certificate],
                productionURL: String = "https://api.storekit.apple.com", sandboxURL: String = "https://api.storekit-sandbox.apple.com",
                recheckInterval: Duration = .seconds(6 * 3600), http: HTTPClientConfiguration = .init(maxInFlight: 8)) {
        self.issuerId = issuerId
        self.keyId = keyId
        self.bundleId = bundleId
        self.privateKey = privateKey
        self.roots = roots
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
        self.recheckInterval = recheckInterval
        self.http = http
    }

    /// Sets the production rate and sandbox at a tenth of it (docs/operations.md, "Entitlements (App Store)").
    public mutating func setRequestsPerSecond(_ rate: Double) {
        productionRate = rate
        sandboxRate = rate / 10
    }

    /// The environment's base URL (`Sandbox` or else production).
    public func baseURL(_ environment: AppStoreEnvironment) -> String { environment == .sandbox ? sandboxURL : productionURL }

    /// The environment's request rate.
    public func rate(_ environment: AppStoreEnvironment) -> Double { environment == .sandbox ? sandboxRate : productionRate }
}

/// The App Store Server API calls the worker makes, each with a bearer ES256 JWT (reused until a minute before it expires).
public struct AppStoreClient: Sendable {
    /// One lookup's answer.
    public enum Answer: Sendable, Equatable {
        case signedTransaction(String)
        /// 404 (errorCode 4040010: transaction id not found).
        case notFound(errorCode: Int?)
        /// 400 (errorCode 4000006: not a valid transaction id): the row's id is at fault, not Apple.
        case invalidRequest(errorCode: Int?)
        /// 429; `retryAt` from Retry-After (UNIX time in milliseconds) when present.
        case rateLimited(retryAt: Date?)
        case unauthorized
        case serverError(status: Int)
        case transportError(String)
    }

    /// One page of Get Notification History.
    public struct HistoryPage: Sendable, Equatable {
        public var signedPayloads: [String]
        public var hasMore: Bool
        public var paginationToken: String?
    }

    /// Get Notification History's answer.
    public enum HistoryAnswer: Sendable, Equatable {
        case page(HistoryPage)
        /// 400 with Apple's errorCode (4000014 invalid / 4000017 expired pagination token, 4000012 start too far back, ...).
        case badRequest(errorCode: Int?)
        case rateLimited(retryAt: Date?)
        case unauthorized
        case serverError(status: Int)
        case transportError(String)
    }

    let configuration: AppStoreConfiguration
    let http: HTTPClient
    let now: @Sendable () -> Date
    private let tokens = TokenCache()

    public init(configuration: AppStoreConfiguration, http: HTTPClient, now: @escaping @Sendable () -> Date = Date.init) {
        self.configuration = configuration
        self.http = http
        self.now = now
    }

    /// The bearer JWT: header alg ES256, kid, typ JWT; claims iss, iat, exp (5 minutes, ≤ 60 allowed), aud, bid.
    public func makeToken() throws(CryptoError) -> String {
        let issuedAt = Int(now().timeIntervalSince1970)
        struct Header: Encodable { let alg = "ES256", kid: String, typ = "JWT" }
        struct Claims: Encodable { let iss: String, iat: Int, exp: Int, aud = "appstoreconnect-v1", bid: String }
        return try JWT.sign(header: Header(kid: configuration.keyId),
                            claims: Claims(iss: configuration.issuerId, iat: issuedAt, exp: issuedAt + 300, bid: configuration.bundleId),
                            key: configuration.privateKey)
    }

    /// A token valid for at least another minute: signing one per request would cost more than the lookup.
    func currentToken() throws(CryptoError) -> String {
        let instant = now()
        if let cached = tokens.valid(at: instant) { return cached }
        let token = try makeToken()
        tokens.store(token, until: instant.addingTimeInterval(240))
        return token
    }

    /// `GET /inApps/v1/transactions/{transactionId}` in the environment's API.
    public func transaction(id: String, environment: AppStoreEnvironment) async -> Answer {
        let path = PercentEncoding.component(id)
        let token: String
        do { token = try currentToken() } catch { return .transportError("cannot sign the request JWT: \(error)") }
        let response: HTTPResponse
        do {
            response = try await http.execute(HTTPRequest(url: "\(configuration.baseURL(environment))/inApps/v1/transactions/\(path)",
                                                          headers: ["Authorization": "Bearer \(token)"], timeout: .seconds(20)))
        } catch {
            return .transportError(error.description)
        }
        let object = JSONValue.parse(bytes: response.body)
        switch response.status {
        case 200:
            guard let signed = object?["signedTransactionInfo"]?.stringValue else { return .serverError(status: 200) }
            return .signedTransaction(signed)
        case 404: return .notFound(errorCode: object?["errorCode"]?.intValue)
        case 400: return .invalidRequest(errorCode: object?["errorCode"]?.intValue)
        case 429: return .rateLimited(retryAt: Self.retryAt(response))
        case 401: return .unauthorized
        default: return .serverError(status: response.status)
        }
    }

    /// `POST /inApps/v1/notifications/history[?paginationToken=…]` for one notification type in `[start, end)`.
    public func notificationHistory(environment: AppStoreEnvironment, type: String, start: Date, end: Date, paginationToken: String?) async -> HistoryAnswer {
        let token: String
        do { token = try currentToken() } catch { return .transportError("cannot sign the request JWT: \(error)") }
        var url = "\(configuration.baseURL(environment))/inApps/v1/notifications/history"
        if let paginationToken {
            url += "?paginationToken=" + PercentEncoding.component(paginationToken)
        }
        let body = JSONValue.object(["startDate": .number(Double(Self.millis(start))), "endDate": .number(Double(Self.millis(end))),
                                     "notificationType": .string(type)])
        let response: HTTPResponse
        do {
            response = try await http.execute(HTTPRequest(method: .post, url: url,
                                                          headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
                                                          body: Array(body.serialized.utf8), timeout: .seconds(30)))
        } catch {
            return .transportError(error.description)
        }
        let object = JSONValue.parse(bytes: response.body)
        switch response.status {
        case 200:
            guard let object, let items = object["notificationHistory"]?.arrayValue, items.allSatisfy({ $0.objectValue != nil }) else {
                return .serverError(status: 200)
            }
            return .page(HistoryPage(signedPayloads: items.compactMap { $0["signedPayload"]?.stringValue },
                                     hasMore: object["hasMore"]?.boolValue ?? false,
                                     paginationToken: object["paginationToken"]?.stringValue))
        case 400: return .badRequest(errorCode: object?["errorCode"]?.intValue)
        case 429: return .rateLimited(retryAt: Self.retryAt(response))
        case 401: return .unauthorized
        default: return .serverError(status: response.status)
        }
    }

    /// Apple's Retry-After on a 429 is a UNIX time in milliseconds.
    static func retryAt(_ response: HTTPResponse) -> Date? {
        // Range-checked like a signedDate: a value no clock can hold would trap where it is logged as an integer.
        response.headers["retry-after"].flatMap(Double.init).flatMap {
            SignedTransactionVerifier.signedDateRange.contains($0) ? Date(timeIntervalSince1970: $0 / 1000) : nil
        }
    }

    /// The nearest millisecond: a checkpoint read back from PostgreSQL (stored in milliseconds, parsed into a binary
    /// fraction of a second) can sit a hair below its millisecond, and rounding down moved the window by one.
    static func millis(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
}

/// The last bearer token and until when it may be reused.
final class TokenCache: Sendable {
    private let state = Mutex<(token: String, until: Date)?>(nil)

    func valid(at instant: Date) -> String? {
        state.withLock { current in current.flatMap { $0.until > instant ? $0.token : nil } }
    }

    func store(_ token: String, until: Date) { state.withLock { $0 = (token, until) } }
}
