import Crypto
import Foundation
import HTTP

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
    public var recheckInterval: Duration
    /// Request rates Apple allows (about 50/s in production, a tenth in sandbox).
    public var productionRate: Double = 40
    public var sandboxRate: Double = 4
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
}

/// `GET /inApps/v1/transactions/{transactionId}` with a fresh ES256 JWT per request.
public struct AppStoreClient: Sendable {
    /// One lookup's answer.
    public enum Answer: Sendable, Equatable {
        case signedTransaction(String)
        /// 404 (errorCode 4040010: transaction id not found).
        case notFound(errorCode: Int?)
        /// 429; `retryAt` from Retry-After (UNIX time in milliseconds) when present.
        case rateLimited(retryAt: Date?)
        case unauthorized
        case serverError(status: Int)
        case transportError(String)
    }

    let configuration: AppStoreConfiguration
    let http: HTTPClient
    let now: @Sendable () -> Date

    public init(configuration: AppStoreConfiguration, http: HTTPClient, now: @escaping @Sendable () -> Date = Date.init) {
        self.configuration = configuration
        self.http = http
        self.now = now
    }

    /// The bearer JWT: header alg ES256, kid, typ JWT; claims iss, iat, exp (5 minutes, ≤ 60 allowed), aud, bid.
    public func makeToken() throws(CryptoError) -> String {
        let issuedAt = Int(now().timeIntervalSince1970)
        return try JWT.sign(header: ["alg": "ES256", "kid": configuration.keyId, "typ": "JWT"],
                            claims: ["iss": configuration.issuerId, "iat": issuedAt, "exp": issuedAt + 300,
                                     "aud": "appstoreconnect-v1", "bid": configuration.bundleId],
                            key: configuration.privateKey)
    }

    /// Looks a transaction up in the environment's API.
    public func transaction(id: String, environment: String) async -> Answer {
        let base = environment == "Sandbox" ? configuration.sandboxURL : configuration.productionURL
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let path = id.addingPercentEncoding(withAllowedCharacters: allowed) ?? id
        let token: String
        do { token = try makeToken() } catch { return .transportError("cannot sign the request JWT: \(error)") }
        let response: HTTPResponse
        do {
            response = try await http.execute(HTTPRequest(url: "\(base)/inApps/v1/transactions/\(path)",
                                                          headers: ["Authorization": "Bearer \(token)"], timeout: .seconds(20)))
        } catch {
            return .transportError(error.description)
        }
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any]
        switch response.status {
        case 200:
            guard let signed = object?["signedTransactionInfo"] as? String else { return .serverError(status: 200) }
            return .signedTransaction(signed)
        case 404: return .notFound(errorCode: (object?["errorCode"] as? NSNumber)?.intValue)
        case 429:
            let retryAt = response.headers["retry-after"].flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) }
            return .rateLimited(retryAt: retryAt)
        case 401: return .unauthorized
        default: return .serverError(status: response.status)
        }
    }
}
