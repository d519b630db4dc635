/// A bad or missing setting. The daemon prints it as one line and exits with status 78 (EX_CONFIG).
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The environment variable (or file) at fault, e.g. `BATCH_SIZE`.
    public var variable: String
    /// What is wrong with it, without echoing secret values.
    public var problem: String

    public init(_ variable: String, _ problem: String) {
        self.variable = variable
        self.problem = problem
    }

    public var description: String { "\(variable): \(problem)" }

    /// sysexits.h EX_CONFIG.
    public static let exitStatus: Int32 = 78
}
