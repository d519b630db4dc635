import ErrorCodes

/// Errors of the FCM module that are not send outcomes: credentials and token minting.
public struct FCMError: CodedError {
    public typealias Code = ErrorCode<FCMError>

    public var code: Code
    /// Names the file and field, or the endpoint and status; never a key or token.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }
}

/// The coarse kinds of `FCMError`.
extension ErrorCode where Family == FCMError {
    /// The service-account file is unreadable or malformed (a configuration error).
    public static let invalidServiceAccount = Self("invalidServiceAccount")
    /// The OAuth token endpoint refused or could not be reached.
    public static let tokenRequestFailed = Self("tokenRequestFailed")
}
