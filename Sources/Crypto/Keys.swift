import COpenSSL
import FoundationEssentials

/// A private key (RSA or EC) loaded from PEM (PKCS#8, PKCS#1 or SEC1). Owns its `EVP_PKEY`.
public final class PrivateKey: Sendable {
    private let handle: OpenSSLHandle
    var raw: OpaquePointer { handle.raw }

    /// Parses a PEM private key; the error never contains key material.
    public init(pem: String) throws(CryptoError) {
        let bytes = Array(pem.utf8)
        let key: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else { throw CryptoError.openSSL(.invalidKey, "not a PEM private key") }
        handle = OpenSSLHandle(key, free: EVP_PKEY_free)
    }

    /// True for EC keys (ES256), false for RSA (RS256).
    public var isEC: Bool { EVP_PKEY_get_base_id(raw) == EVP_PKEY_EC }

    /// True for RSA keys (a Google service account's RS256 key).
    public var isRSA: Bool { EVP_PKEY_get_base_id(raw) == EVP_PKEY_RSA }

    /// True for EC keys on P-256 (prime256v1), the curve of ES256 and of App Store `.p8` keys.
    public var isP256: Bool {
        guard isEC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(raw, &name, name.count, &length) == 1 else { return false }
        let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    /// Signs SHA-256 of `data`: PKCS#1 v1.5 for RSA, DER-encoded ECDSA for EC.
    public func signSHA256(_ data: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError(.signingFailed, "EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, raw) == 1 else {
            throw CryptoError.openSSL(.signingFailed, "EVP_DigestSignInit")
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, data, data.count) == 1 else {
            throw CryptoError.openSSL(.signingFailed, "EVP_DigestSign (size)")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, data, data.count) == 1 else {
            throw CryptoError.openSSL(.signingFailed, "EVP_DigestSign")
        }
        return Array(signature.prefix(length))
    }

    /// The matching public key.
    public func publicKey() throws(CryptoError) -> PublicKey {
        // Round-trip through DER SubjectPublicKeyInfo to get an independent public-only key.
        var der: UnsafeMutablePointer<UInt8>?
        let length = i2d_PUBKEY(raw, &der)
        guard length > 0, let der else { throw CryptoError.openSSL(.invalidKey, "i2d_PUBKEY") }
        defer { CRYPTO_free(der, #fileID, #line) }
        return try PublicKey(der: Array(UnsafeBufferPointer(start: der, count: Int(length))))
    }
}

/// A public key (RSA or EC). Owns its `EVP_PKEY`.
public final class PublicKey: Sendable {
    private let handle: OpenSSLHandle
    var raw: OpaquePointer { handle.raw }

    init(owning raw: OpaquePointer) { handle = OpenSSLHandle(raw, free: EVP_PKEY_free) }

    /// Parses a PEM `PUBLIC KEY` or takes the key of a PEM `CERTIFICATE`.
    public init(pem: String) throws(CryptoError) {
        let bytes = Array(pem.utf8)
        let key: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            if pem.contains("BEGIN CERTIFICATE") {
                guard let certificate = PEM_read_bio_X509(bio, nil, nil, nil) else { return nil }
                defer { X509_free(certificate) }
                return X509_get_pubkey(certificate)
            }
            return PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let key else { throw CryptoError.openSSL(.invalidKey, "not a PEM public key or certificate") }
        handle = OpenSSLHandle(key, free: EVP_PKEY_free)
    }

    /// Parses DER SubjectPublicKeyInfo.
    public init(der: [UInt8]) throws(CryptoError) {
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let key else { throw CryptoError.openSSL(.invalidKey, "not a DER public key") }
        handle = OpenSSLHandle(key, free: EVP_PKEY_free)
    }

    /// True for EC keys.
    public var isEC: Bool { EVP_PKEY_get_base_id(raw) == EVP_PKEY_EC }

    /// Verifies a SHA-256 signature (PKCS#1 v1.5 for RSA, DER ECDSA for EC).
    public func verifySHA256(signature: [UInt8], data: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, raw) == 1 else { ERR_clear_error(); return false }
        let ok = EVP_DigestVerify(context, signature, signature.count, data, data.count) == 1
        ERR_clear_error()
        return ok
    }
}
