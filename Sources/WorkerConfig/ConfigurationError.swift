import TextSupport
/// A bad or missing setting. The daemon prints it as one line and exits with status 78 (EX_CONFIG).
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The environment variable (or file) at fault, e.g. `BATCH_SIZE`.
    public var variable: String
    /// What is wrong with it, without echoing secret values, on one line: a problem quotes the value or the path it
    /// refuses, and one set with a line break in it must not print a line of its own.
    public var problem: String

    public init(_ variable: String, _ problem: String) {
        self.variable = variable
        self.problem = Printable.escaped(problem)
    }

    public var description: String { "\(variable): \(problem)" }

    /// sysexits.h EX_CONFIG.
    public static let exitStatus: Int32 = 78
}

/// Every bad setting found in one pass (`check-config` and `run` name all of them, not only the first).
public struct ConfigurationErrors: Error, Sendable, Equatable, CustomStringConvertible {
    /// At least one.
    public var errors: [ConfigurationError]

    public init(_ errors: [ConfigurationError]) { self.errors = errors }

    /// One setting per line, `NAME: problem`.
    public var description: String {
        errors.count == 1 ? errors[0].description
            : "\(errors.count) bad settings:\n" + errors.map { "  \($0)" }.joined(separator: "\n")
    }
}
