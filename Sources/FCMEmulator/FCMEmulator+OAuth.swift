import Crypto
import Foundation
import HTTPServer

extension FCMEmulator {
    /// Google's OAuth token endpoint for the JWT-bearer grant (RFC 7523).
    func issueToken(_ request: HTTPServerRequest) -> HTTPServerResponse {
        let refusal = state.withLock { s -> (error: String, description: String)? in
            s.counters.tokenRequests += 1
            if let until = s.tokenRefusalUntil, Date() >= until { s.tokenRefusal = nil; s.tokenRefusalUntil = nil }
            return s.tokenRefusal
        }
        // Google's answer to a deleted or disabled key, or a host clock far off.
        if let refusal { return refuse(refusal.error, refusal.description) }
        let form = Self.parseForm(String(decoding: request.body, as: UTF8.self))
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else {
            return refuse("unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
        guard let assertion = form["assertion"] else { return refuse("invalid_request", "Missing required parameter: assertion") }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Base64URL.decode(parts[0]), let claimsData = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]),
              let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any] else {
            return refuse("invalid_grant", "Invalid JWT: malformed")
        }
        guard header["alg"] as? String == "RS256" else { return refuse("invalid_grant", "Invalid JWT: alg must be RS256") }
        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        guard publicKey.verifySHA256(signature: Array(signature), data: signingInput) else {
            return refuse("invalid_grant", "Invalid JWT Signature.")
        }
        let now = Date().timeIntervalSince1970
        guard let exp = (claims["exp"] as? NSNumber)?.doubleValue, let iat = (claims["iat"] as? NSNumber)?.doubleValue else {
            return refuse("invalid_grant", "Invalid JWT: missing iat or exp")
        }
        guard exp > now, iat <= now + 60, exp - iat <= 3600 else {
            return refuse("invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
        }
        // Google accepts its canonical token endpoint as aud too (google-auth always sends that one).
        guard let aud = claims["aud"] as? String, aud == tokenURI || aud == "https://oauth2.googleapis.com/token" else {
            return refuse("invalid_grant", "Invalid JWT: aud is not the token endpoint")
        }
        if let expected = configuration.clientEmail, claims["iss"] as? String != expected {
            return refuse("invalid_grant", "Invalid JWT: iss is not the service account")
        }
        let scopes = (claims["scope"] as? String ?? "").split(separator: " ")
        // FCM accepts the firebase.messaging scope or the broad cloud-platform one (firebase-admin asks for the latter).
        guard scopes.contains("https://www.googleapis.com/auth/firebase.messaging")
            || scopes.contains("https://www.googleapis.com/auth/cloud-platform") else {
            return refuse("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        }
        var token = "ya29.emulated-" + UUID().uuidString.lowercased()
        if let length = configuration.tokenBytes, length > token.utf8.count {
            // Padded with token characters (RFC 6750 b64token) to the configured length.
            let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
            token += "." + String((0..<(length - token.utf8.count - 1)).map { _ in alphabet.randomElement()! })
        }
        let lifetime = configuration.tokenLifetime
        state.withLock { s in
            s.issued[token] = Date().addingTimeInterval(TimeInterval(lifetime))
            s.counters.tokensIssued += 1
        }
        return .json(200, Self.serialize(["access_token": token, "expires_in": lifetime, "token_type": "Bearer"]))
    }

    private func refuse(_ error: String, _ description: String) -> HTTPServerResponse {
        state.withLock { s in s.counters.assertionsRefused += 1 }
        return .json(400, Self.serialize(["error": error, "error_description": description]))
    }

    /// True when the bearer token was issued here and has not expired or been revoked.
    func isAuthorized(_ request: HTTPServerRequest) -> Bool {
        guard let header = request.headers["authorization"], header.hasPrefix("Bearer ") else { return false }
        let token = String(header.dropFirst("Bearer ".count))
        return state.withLock { s in s.issued[token].map { $0 > Date() } ?? false }
    }

    static func parseForm(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map {
                $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0)
            }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return fields
    }
}
