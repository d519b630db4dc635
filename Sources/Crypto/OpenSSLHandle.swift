import COpenSSL

/// Owns one OpenSSL object (`EVP_PKEY`, `X509`) and frees it exactly once.
///
/// `@unchecked Sendable` by a documented invariant: the object is never mutated after it is
/// parsed, and OpenSSL 3 allows concurrent read-only use of keys and certificates (signing and
/// verifying create their own per-call contexts). This is the Crypto module's only such type.
final class OpenSSLHandle: @unchecked Sendable {
    let raw: OpaquePointer
    private let free: (OpaquePointer) -> Void

    init(_ raw: OpaquePointer, free: @escaping (OpaquePointer) -> Void) {
        self.raw = raw
        self.free = free
    }

    deinit { free(raw) }
}
