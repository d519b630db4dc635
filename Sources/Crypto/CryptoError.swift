import COpenSSL
import ErrorCodes

/// Errors from the Crypto module. Descriptions never contain key material.
public struct CryptoError: CodedError {
    public typealias Code = ErrorCode<CryptoError>

    public var code: Code
    /// Human-readable detail (OpenSSL's reason where there is one).
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }


    /// Builds an error with OpenSSL's most recent queued reason appended, and clears the queue.
    static func openSSL(_ code: Code, _ what: String) -> CryptoError {
        var reasons: [String] = []
        while case let err = ERR_get_error(), err != 0 {
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(err, &buffer, buffer.count)
            reasons.append(buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        }
        return CryptoError(code, reasons.isEmpty ? what : "\(what): \(reasons.last!)")
    }
}

/// The coarse kinds of `CryptoError`.
extension ErrorCode where Family == CryptoError {
    public static let invalidKey = Self("invalidKey")
    public static let invalidCertificate = Self("invalidCertificate")
    public static let signingFailed = Self("signingFailed")
    public static let verificationFailed = Self("verificationFailed")
    public static let chainInvalid = Self("chainInvalid")
    public static let malformedInput = Self("malformedInput")
}
