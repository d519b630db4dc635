import COpenSSL

/// Message digests through OpenSSL's EVP interface.
public enum Digest {
    /// SHA-256 of `data` (32 bytes).
    public static func sha256(_ data: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        _ = EVP_Digest(data, data.count, &output, &length, sha256Algorithm, nil)
        return output
    }

    /// SHA-256 fetched from the default provider once: `EVP_sha256()` is fetched again on every digest under
    /// OpenSSL 3 (a third of the digest's instructions, once per FCM message). Never freed: it lives as long as the process.
    nonisolated(unsafe) private static let sha256Algorithm: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()

    /// Lower-case hex of bytes.
    /// (Once per FCM message: written as bytes into one buffer, not appended as Characters.)
    public static func hex(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { buffer in
            for (index, byte) in bytes.enumerated() {
                buffer[2 * index] = hexDigit(byte >> 4)
                buffer[2 * index + 1] = hexDigit(byte & 0x0F)
            }
            return bytes.count * 2
        }
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? 0x30 + nibble : 0x57 + nibble
    }
}
