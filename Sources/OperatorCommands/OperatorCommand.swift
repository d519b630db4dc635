import FoundationEssentials
import TextSupport
import WorkerConfig
import JSON

/// One operator command (`status`, `event`, `redrive`, …): its name and help, its arguments parsed into a value, and
/// a run that returns one report, printed as text for people or as one JSON document with `--json`.
public protocol OperatorCommand: Sendable {
    /// The word after `medication-worker`.
    static var name: String { get }
    /// One line for the general help.
    static var summary: String { get }
    /// `medication-worker <name> --help`: usage line, what it does, its options.
    static var help: String { get }
    /// Parses the command's own arguments (`--json` and `--help` are taken off before).
    init(arguments: inout CommandArguments) throws(UsageError)
    /// Does the work; a failure that is not the operator's input is thrown as `CommandFailure` (exit 1).
    func run(_ context: CommandContext) async throws -> any CommandReport
}

/// The result of a command: one value that renders both ways, so the text and the JSON cannot say different things.
public protocol CommandReport: Sendable {
    /// For people: what was done (or would be, in a dry run), what was skipped and why.
    var text: String { get }
    /// For scripts: the same facts as one JSON object.
    var json: JSONValue { get }
    /// 0 when the command did what was asked; 1 when part of it could not be done (the report says what).
    var exitStatus: Int32 { get }
    /// For stderr beside either rendering: what went wrong, when the report carries its own failure (`check-config`).
    var errorText: String { get }
}

extension CommandReport {
    public var exitStatus: Int32 { ExitStatus.ok }
    public var errorText: String { "" }
}

/// sysexits.h statuses (docs/operations.md, "Operator commands").
public enum ExitStatus {
    public static let ok: Int32 = 0
    /// A runtime failure: the database unreachable, a row not found, work refused.
    public static let failure: Int32 = 1
    /// EX_USAGE: unknown command or option, a malformed value.
    public static let usage: Int32 = 64
    /// EX_CONFIG: a bad or missing setting.
    public static let config: Int32 = 78
}

/// The operator's input was wrong (exit 64).
public struct UsageError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The command could not do what was asked (exit 1); `details` travel into the `--json` error document.
public struct CommandFailure: Error, Sendable, CustomStringConvertible {
    public var description: String
    public var details: [String: JSONValue]
    public init(_ description: String, details: [String: JSONValue] = [:]) {
        self.description = description
        self.details = details
    }
}

/// The arguments after the command name, consumed option by option; anything left over is a usage error.
public struct CommandArguments: Sendable {
    private(set) var rest: [String]
    let command: String

    public init(_ arguments: [String], command: String) {
        rest = arguments
        self.command = command
    }

    /// Takes `name` when present (a flag without a value).
    public mutating func flag(_ name: String) -> Bool {
        guard let index = rest.firstIndex(of: name) else { return false }
        rest.remove(at: index)
        return true
    }

    /// Takes `name VALUE` or `name=VALUE`; nil when absent.
    public mutating func value(_ name: String) throws(UsageError) -> String? {
        if let index = rest.firstIndex(where: { $0.hasPrefix(name + "=") }) {
            let value = String(rest[index].dropFirst(name.count + 1))
            rest.remove(at: index)
            guard !value.isEmpty else { throw UsageError("\(name) needs a value") }
            return value
        }
        guard let index = rest.firstIndex(of: name) else { return nil }
        guard index + 1 < rest.count, !rest[index + 1].hasPrefix("--"), !rest[index + 1].isEmpty else {
            throw UsageError("\(name) needs a value")
        }
        let value = rest[index + 1]
        rest.removeSubrange(index...index + 1)
        return value
    }

    /// `name DURATION` (`30m`, `2h`, `7d`; a bare number is seconds).
    public mutating func duration(_ name: String) throws(UsageError) -> Duration? {
        guard let text = try value(name) else { return nil }
        guard let duration = CommandValues.duration(text) else {
            if ValueParsing.durationIsTooLarge(text) {
                throw UsageError("\(name) must be at most \(ValueParsing.maxDurationText) (100 years), got \"\(Printable.escaped(String(text.prefix(40))))\"")
            }
            throw UsageError("\(name) must be a duration such as 30m, 2h or 7d, got \"\(Printable.escaped(text))\"")
        }
        return duration
    }

    /// `name N` for a positive whole number.
    public mutating func positiveInteger(_ name: String, max: Int = Int(Int32.max)) throws(UsageError) -> Int? {
        guard let text = try value(name) else { return nil }
        guard let number = Int(text), number > 0, number <= max else {
            throw UsageError("\(name) must be a whole number from 1 to \(max), got \"\(Printable.escaped(text))\"")
        }
        return number
    }

    /// The next positional argument, if any: not an option (a negative number is an argument, for the command to refuse
    /// by name).
    public mutating func positional() -> String? {
        guard let index = rest.firstIndex(where: { !$0.hasPrefix("-") || Int64($0) != nil }) else { return nil }
        return rest.remove(at: index)
    }

    /// Fails when anything was not consumed.
    public func finish() throws(UsageError) {
        guard rest.isEmpty else {
            throw UsageError("\(command): unexpected argument\(rest.count > 1 ? "s" : "") \(Printable.escaped(rest.joined(separator: " ")))")
        }
    }
}
