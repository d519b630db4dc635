import COpenSSL

/// Errors from the Crypto module. Descriptions never contain key material.
public struct CryptoError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, coarse-grained.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        public static let invalidKey = Code("invalidKey")
        public static let invalidCertificate = Code("invalidCertificate")
        public static let signingFailed = Code("signingFailed")
        public static let verificationFailed = Code("verificationFailed")
        public static let chainInvalid = Code("chainInvalid")
        public static let malformedInput = Code("malformedInput")
    }

    public var code: Code
    /// Human-readable detail (OpenSSL's reason where there is one).
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }

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
