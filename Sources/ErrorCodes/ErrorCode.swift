/// A coarse error kind with a name, one family per error type (`ErrorCode<HTTPError>`): what every module's error
/// struct needs to be matched on (`error.code == .timeout`) and printed, written once.
public struct ErrorCode<Family>: Hashable, Sendable, CustomStringConvertible {
    public let name: String
    public init(_ name: String) { self.name = name }
    public var description: String { name }
}

/// An error made of a coarse `code` and a human-readable `message`, printed as `code: message`.
public protocol CodedError: Error, Sendable, CustomStringConvertible {
    associatedtype Family
    var code: ErrorCode<Family> { get }
    var message: String { get }
}

extension CodedError {
    public var description: String { "\(code): \(message)" }
}
