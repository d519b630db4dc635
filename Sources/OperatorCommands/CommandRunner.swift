import FoundationEssentials
import JSON
import TextSupport
import WorkerConfig

/// Runs one operator command from the command line: `--help` gives that command's own help, `--json` one JSON document
/// on stdout; the exit status is 0 ok, 1 runtime failure, 64 usage, 78 configuration.
public enum CommandRunner {
    /// Every operator command, in the order the general help lists them.
    public static let commands: [any OperatorCommand.Type] = [
        MigrateCommand.self, CheckConfigCommand.self, StatusCommand.self, EventCommand.self, EventsCommand.self,
        RedriveCommand.self, ResendCommand.self, DevicesCommand.self,
    ]

    /// The command named `name`, if there is one.
    public static func command(named name: String) -> (any OperatorCommand.Type)? {
        commands.first { $0.name == name }
    }

    /// The lines of the general help that list the commands.
    public static var commandSummaries: String {
        commands.map { "  " + $0.name.padding(toLength: 16) + $0.summary }.joined(separator: "\n")
    }

    /// What a command printed and its exit status.
    public struct Result: Sendable {
        public var status: Int32
        /// stdout: the report (text, or one JSON document with `--json`).
        public var output: String
        /// stderr: the error, if any.
        public var errorOutput: String
    }

    /// Parses and runs `type` with `arguments` (what follows its name), prints what it reports; returns the exit status.
    public static func run(_ type: any OperatorCommand.Type, arguments: [String], environment: [String: String]) async -> Int32 {
        let result = await execute(type, arguments: arguments, environment: environment)
        if !result.output.isEmpty { StandardStreams.out(result.output) }
        if !result.errorOutput.isEmpty { StandardStreams.error(result.errorOutput) }
        return result.status
    }

    /// Parses and runs `type`; returns what it would print (tests assert on exactly this), escaped for a terminal:
    /// text through `Printable.lines`, the `--json` document through `Printable.json`.
    public static func execute(_ type: any OperatorCommand.Type, arguments: [String], environment: [String: String]) async -> Result {
        let json = arguments.contains("--json")
        var result = await unescaped(type, arguments: arguments, environment: environment)
        result.output = json ? Printable.json(result.output) : Printable.lines(result.output)
        result.errorOutput = Printable.lines(result.errorOutput)
        return result
    }

    private static func unescaped(_ type: any OperatorCommand.Type, arguments: [String], environment: [String: String]) async -> Result {
        var arguments = CommandArguments(arguments, command: type.name)
        if arguments.flag("--help") || arguments.flag("-h") {
            return Result(status: ExitStatus.ok, output: type.help, errorOutput: "")
        }
        let json = arguments.flag("--json")
        let command: any OperatorCommand
        do {
            command = try type.init(arguments: &arguments)
            try arguments.finish()
        } catch {
            return failure(json: json, status: ExitStatus.usage, kind: "usage",
                           message: "medication-worker \(type.name): \(error)\nTry 'medication-worker \(type.name) --help'.", details: [:])
        }
        do {
            let report = try await command.run(CommandContext(environment: environment))
            return Result(status: report.exitStatus, output: json ? report.json.serialized : report.text, errorOutput: report.errorText)
        } catch let error as ConfigurationError {
            return failure(json: json, status: ExitStatus.config, kind: "configuration",
                           message: "medication-worker: configuration error: \(error)",
                           details: ["setting": .string(error.variable), "errors": .array([Self.json(error)])])
        } catch let error as ConfigurationErrors {
            return failure(json: json, status: ExitStatus.config, kind: "configuration",
                           message: "medication-worker: configuration error: \(error)",
                           details: ["setting": .string(error.errors.first?.variable ?? ""), "errors": .array(error.errors.map(Self.json))])
        } catch let error as CommandFailure {
            return failure(json: json, status: ExitStatus.failure, kind: "failure",
                           message: "medication-worker \(type.name): \(error)", details: error.details)
        } catch {
            return failure(json: json, status: ExitStatus.failure, kind: "failure",
                           message: "medication-worker \(type.name) failed: \(error)", details: [:])
        }
    }

    /// One bad setting as the JSON error lists it.
    static func json(_ error: ConfigurationError) -> JSONValue {
        .object(["setting": .string(error.variable), "problem": .string(error.problem)])
    }

    /// The error for stderr, and with `--json` also as the one document on stdout, so a script always gets JSON.
    static func failure(json: Bool, status: Int32, kind: String, message: String, details: [String: JSONValue]) -> Result {
        var output = ""
        if json {
            var error = details
            error["kind"] = .string(kind)
            error["message"] = .string(message.split(separator: "\n").first.map(String.init) ?? message)
            error["exitStatus"] = .number(Double(status))
            output = JSONValue.object(["error": .object(error)]).serialized
        }
        return Result(status: status, output: output, errorOutput: message)
    }

}

extension String {
    func padding(toLength length: Int) -> String {
        count >= length ? self + " " : self + String(repeating: " ", count: length - count)
    }
}
