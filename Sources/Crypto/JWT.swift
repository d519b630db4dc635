import Foundation

/// Compact JWS signing (RS256, ES256) for the JWTs this worker sends.
public enum JWT {
    /// Signs `header.claims` (JSON objects) with `key`; ES256 signatures are converted to raw r‖s.
    public static func sign(header: [String: Any], claims: [String: Any], key: PrivateKey) throws(CryptoError) -> String {
        let encode = { (object: [String: Any]) throws(CryptoError) -> String in
            do {
                let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
                return Base64URL.encode(data)
            } catch {
                throw CryptoError(.malformedInput, "JWT part is not JSON-serialisable")
            }
        }
        let signingInput = try encode(header) + "." + encode(claims)
        var signature = try key.signSHA256(Array(signingInput.utf8))
        if key.isEC { signature = try ECDSASignature.derToRaw(signature, coordinateSize: 32) }
        return signingInput + "." + Base64URL.encode(signature)
    }
}
