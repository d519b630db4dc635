import JSON
import WorkerConfig

/// `check-config`: loads and checks everything `run` would, and prints the effective configuration, secrets redacted.
struct CheckConfigCommand: OperatorCommand {
    static let name = "check-config"
    static let summary = "Check the configuration as `run` would and print it, secrets redacted."
    static let help = """
        Usage: medication-worker check-config [--json]

        Loads and checks the configuration from the environment exactly as `run` does and prints it with
        secrets redacted. Exit status 78 names the bad setting.
        """

    init(arguments: inout CommandArguments) throws(UsageError) {}

    struct Report: CommandReport {
        var lines: [(String, String)]

        var text: String { (lines.map { "\($0.0)=\($0.1)" } + ["configuration OK"]).joined(separator: "\n") }

        var json: JSONValue {
            .object(["ok": .bool(true), "settings": .object(Dictionary(lines.map { ($0.0, JSONValue.string($0.1)) }, uniquingKeysWith: { a, _ in a }))])
        }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        let configuration = try Configuration.load(from: context.environment)
        let lines = configuration.redactedDescription.split(separator: "\n").map { line -> (String, String) in
            let parts = line.split(separator: "=", maxSplits: 1)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }
        return Report(lines: lines)
    }
}
