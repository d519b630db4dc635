import COpenSSL

/// Message digests through OpenSSL's EVP interface.
public enum Digest {
    /// SHA-256 of `data` (32 bytes).
    public static func sha256(_ data: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        _ = EVP_Digest(data, data.count, &output, &length, EVP_sha256(), nil)
        return output
    }

    /// Lower-case hex of bytes.
    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        var text = ""
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return text
    }
}
