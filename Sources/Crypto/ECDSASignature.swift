import COpenSSL

/// Conversions between OpenSSL's DER ECDSA signatures and JWS's raw r‖s (RFC 7518 §3.4).
public enum ECDSASignature {
    /// DER `ECDSA-Sig-Value` → r‖s, each left-padded to `coordinateSize` bytes (32 for P-256).
    public static func derToRaw(_ der: [UInt8], coordinateSize: Int) throws(CryptoError) -> [UInt8] {
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { throw CryptoError.openSSL(.malformedInput, "not a DER ECDSA signature") }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        var raw = [UInt8](repeating: 0, count: 2 * coordinateSize)
        let ok = raw.withUnsafeMutableBufferPointer { buffer -> Bool in
            BN_bn2binpad(r, buffer.baseAddress, Int32(coordinateSize)) == Int32(coordinateSize)
                && BN_bn2binpad(s, buffer.baseAddress! + coordinateSize, Int32(coordinateSize)) == Int32(coordinateSize)
        }
        guard ok else { throw CryptoError(.malformedInput, "ECDSA coordinate larger than \(coordinateSize) bytes") }
        return raw
    }

    /// r‖s → DER, for OpenSSL's verifier.
    public static func rawToDer(_ raw: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard raw.count % 2 == 0, !raw.isEmpty else { throw CryptoError(.malformedInput, "raw ECDSA signature has odd length") }
        let half = raw.count / 2
        guard let signature = ECDSA_SIG_new() else { throw CryptoError(.malformedInput, "ECDSA_SIG_new failed") }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(half), nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + half, Int32(half), nil) }
        guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else {
            throw CryptoError(.malformedInput, "cannot build ECDSA signature")
        }
        var der: UnsafeMutablePointer<UInt8>?
        let length = i2d_ECDSA_SIG(signature, &der)
        guard length > 0, let der else { throw CryptoError.openSSL(.malformedInput, "i2d_ECDSA_SIG") }
        defer { CRYPTO_free(der, #fileID, #line) }
        return Array(UnsafeBufferPointer(start: der, count: Int(length)))
    }
}
