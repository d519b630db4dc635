import Crypto
import Foundation
import HTTPServer
import TestSupport

/// A loopback App Store Server API over TLS: checks the client's ES256 JWT the way Apple does,
/// then answers per transaction id with a signed transaction, 404 (errorCode 4040010) or 429.
final class FakeAppStore: @unchecked Sendable {
    enum Answer: Sendable {
        case signed(String)
        case notFound
        case rateLimited(retryAtMillis: Int64)
        case status(Int)
    }

    private let lock = NSLock()
    private var answers: [String: Answer] = [:]
    private(set) var requestedIds: [String] = []
    private(set) var refusedTokens = 0
    private var server: HTTPServer!
    let apiPublicKey: PublicKey
    let keyId: String
    let issuerId: String
    let bundleId: String

    init(apiPublicKeyPEM: String, keyId: String, issuerId: String, bundleId: String) throws {
        apiPublicKey = try PublicKey(pem: apiPublicKeyPEM)
        self.keyId = keyId
        self.issuerId = issuerId
        self.bundleId = bundleId
        let fixtures = TLSFixtures.shared
        server = try HTTPServer(tls: TLSIdentity(certificatePEM: fixtures.serverCertificatePEM, privateKeyPEM: fixtures.serverKeyPEM)) {
            [unowned self] request in self.handle(request)
        }
    }

    var baseURL: String { "https://127.0.0.1:\(server.port)" }
    var requests: [String] { lock.withLock { requestedIds } }
    var refused: Int { lock.withLock { refusedTokens } }

    func answer(_ transactionId: String, _ answer: Answer) { lock.withLock { answers[transactionId] = answer } }

    func stop() { server.stop() }

    private func handle(_ request: HTTPServerRequest) -> HTTPServerResponse {
        let prefix = "/inApps/v1/transactions/"
        guard request.method == "GET", request.path.hasPrefix(prefix) else { return .json(404, #"{"errorCode":4040000}"#) }
        guard let auth = request.headers["authorization"], auth.hasPrefix("Bearer "), verifyJWT(String(auth.dropFirst(7))) else {
            lock.withLock { refusedTokens += 1 }
            return HTTPServerResponse(status: 401, body: Array("Unauthenticated".utf8))
        }
        let id = String(request.path.dropFirst(prefix.count))
        let answer = lock.withLock { () -> Answer? in
            requestedIds.append(id)
            return answers[id]
        }
        switch answer {
        case .signed(let jws)?: return .json(200, #"{"signedTransactionInfo":"\#(jws)"}"#)
        case .rateLimited(let millis)?:
            return .json(429, #"{"errorCode":4290000,"errorMessage":"Rate limit exceeded."}"#, headers: ["Retry-After": "\(millis)"])
        case .status(let status)?: return .json(status, #"{"errorCode":5000000,"errorMessage":"An unknown error occurred."}"#)
        case .notFound?, nil: return .json(404, #"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#)
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
