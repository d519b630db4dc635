import FoundationEssentials

/// Compact JWS signing (RS256, ES256) for the JWTs this worker sends.
public enum JWT {
    /// Signs `header.claims` (JSON objects, written with sorted keys and unescaped slashes) with `key`; ES256
    /// signatures are converted to raw r‖s.
    public static func sign(header: some Encodable, claims: some Encodable, key: PrivateKey) throws(CryptoError) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let headerJSON: Data
        let claimsJSON: Data
        do {
            headerJSON = try encoder.encode(header)
            claimsJSON = try encoder.encode(claims)
        } catch {
            throw CryptoError(.malformedInput, "JWT part is not JSON-serialisable")
        }
        return try sign(headerJSON: headerJSON, claimsJSON: claimsJSON, key: key)
    }

    /// Signs parts already written as JSON.
    public static func sign(headerJSON: Data, claimsJSON: Data, key: PrivateKey) throws(CryptoError) -> String {
        let signingInput = Base64URL.encode(headerJSON) + "." + Base64URL.encode(claimsJSON)
        var signature = try key.signSHA256(Array(signingInput.utf8))
        if key.isEC { signature = try ECDSASignature.derToRaw(signature, coordinateSize: 32) }
        return signingInput + "." + Base64URL.encode(signature)
    }
}
