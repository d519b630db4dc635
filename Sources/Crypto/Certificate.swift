import COpenSSL
import FoundationEssentials

/// An X.509 certificate (PEM or DER). Owns its `X509`.
public final class Certificate: Sendable {
    private let handle: OpenSSLHandle
    var raw: OpaquePointer { handle.raw }

    /// Parses DER.
    public init(der: [UInt8]) throws(CryptoError) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw CryptoError.openSSL(.invalidCertificate, "not a DER certificate") }
        handle = OpenSSLHandle(parsed, free: X509_free)
    }

    /// Parses PEM or DER bytes (as certificate files come either way).
    public convenience init(pemOrDER bytes: [UInt8]) throws(CryptoError) {
        let text = String(decoding: bytes.prefix(64), as: UTF8.self)
        guard text.contains("-----BEGIN") else {
            try self.init(der: bytes)
            return
        }
        let parsed: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_X509(bio, nil, nil, nil)
        }
        guard let parsed else { throw CryptoError.openSSL(.invalidCertificate, "not a PEM certificate") }
        var der: UnsafeMutablePointer<UInt8>?
        let length = i2d_X509(parsed, &der)
        X509_free(parsed)
        guard length > 0, let der else { throw CryptoError.openSSL(.invalidCertificate, "i2d_X509") }
        defer { CRYPTO_free(der, #fileID, #line) }
        try self.init(der: Array(UnsafeBufferPointer(start: der, count: Int(length))))
    }


    /// True when the certificate carries an extension with this dotted OID (critical or not).
    public func hasExtension(oid: String) -> Bool {
        guard let object = OBJ_txt2obj(oid, 1) else { return false }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(raw, object, -1) >= 0
    }

    /// The subject's public key.
    public func publicKey() throws(CryptoError) -> PublicKey {
        guard let key = X509_get_pubkey(raw) else { throw CryptoError.openSSL(.invalidCertificate, "no public key") }
        return PublicKey(owning: key)
    }

    /// Verifies `leaf` → `intermediates` → one of `roots` at `time` (validity periods checked then).
    /// Throws `.chainInvalid` with OpenSSL's reason.
    public static func verifyChain(leaf: Certificate, intermediates: [Certificate], roots: [Certificate], at time: Date) throws(CryptoError) {
        guard let store = X509_STORE_new() else { throw CryptoError(.chainInvalid, "X509_STORE_new failed") }
        defer { X509_STORE_free(store) }
        for root in roots { X509_STORE_add_cert(store, root.raw) }
        guard let untrusted = mw_sk_x509_new() else { throw CryptoError(.chainInvalid, "cannot allocate a stack") }
        defer { mw_sk_x509_free(untrusted) }
        for intermediate in intermediates { _ = mw_sk_x509_push(untrusted, intermediate.raw) }
        guard let context = X509_STORE_CTX_new() else { throw CryptoError(.chainInvalid, "X509_STORE_CTX_new failed") }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, leaf.raw, untrusted) == 1 else {
            throw CryptoError.openSSL(.chainInvalid, "X509_STORE_CTX_init")
        }
        // time_t(...) traps on a value it cannot hold (a NaN, 1e300): refuse it as an invalid chain instead.
        let seconds = time.timeIntervalSince1970
        guard seconds.isFinite, seconds >= -62_135_596_800, seconds <= 253_402_300_799 else {
            throw CryptoError(.chainInvalid, "the verification time is out of range")
        }
        X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(context), time_t(seconds))
        guard X509_verify_cert(context) == 1 else {
            let code = X509_STORE_CTX_get_error(context)
            ERR_clear_error()
            throw CryptoError(.chainInvalid, String(cString: X509_verify_cert_error_string(Int(code))))
        }
    }
}
