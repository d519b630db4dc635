/// Errors of the FCM module that are not send outcomes: credentials and token minting.
public struct FCMError: Error, Sendable, CustomStringConvertible {
    /// Coarse kind of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// The service-account file is unreadable or malformed (a configuration error).
        public static let invalidServiceAccount = Code("invalidServiceAccount")
        /// The OAuth token endpoint refused or could not be reached.
        public static let tokenRequestFailed = Code("tokenRequestFailed")
    }

    public var code: Code
    /// Names the file and field, or the endpoint and status; never a key or token.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
