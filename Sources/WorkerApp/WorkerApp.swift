import Systemd
import Crypto
import FoundationEssentials
import Logging
import OperatorCommands
import Postgres
import Schema
import TextSupport
import WorkerConfig

/// The daemon's command line: `run` (default) and the operator commands of `OperatorCommands`.
public enum WorkerApp {
    /// The program version printed by `--version`.
    public static let version = "0.2.0"

    /// sysexits.h statuses the CLI uses.
    public typealias ExitStatus = OperatorCommands.ExitStatus

    public static var usage: String {
        """
        Usage: medication-worker [COMMAND] [OPTIONS]

        Delivers DOSE_TAKEN outbox events as FCM pushes and re-checks App Store entitlements.

        Commands:
          run             Run the daemon (default).
        \(CommandRunner.commandSummaries)

        Options:
          -h, --help      Show this help; `medication-worker COMMAND --help` shows that command's.
          --version       Show the version.
          --json          (after a command that reports) one JSON document on stdout.

        Configuration comes from the environment; see config/worker.env.
        Exit status: 0 ok, 1 runtime failure, 64 usage error, 78 configuration error.
        """
    }

    /// Runs the CLI; returns the exit status.
    public static func main(arguments: [String], environment: [String: String]) async -> Int32 {
        // Before anything touches OpenSSL (a key file, libpq, libcurl): threads still closing connections when
        // `exit` runs must not find OpenSSL's locks freed under them.
        OpenSSLProcess.keepStateUntilExit()
        var rest = Array(arguments.dropFirst())
        if rest.first == "--version" {
            StandardStreams.out("medication-worker \(version)")
            return ExitStatus.ok
        }
        if rest.first == "-h" || rest.first == "--help" || rest.first == "help" {
            if rest.first == "help", rest.count > 1, let type = CommandRunner.command(named: rest[1]) {
                StandardStreams.out(type.help)
            } else {
                StandardStreams.out(usage)
            }
            return ExitStatus.ok
        }
        let command = rest.isEmpty || rest[0].hasPrefix("-") ? "run" : rest.removeFirst()
        // Every command reads a secret (DATABASE_URL; check-config and run both keys, --online a minted token): none may
        // reach a core file. `run` checks the result and warns (Daemon.run).
        ProcessHardening.disableCoreDumps()
        switch command {
        case "run":
            if rest.contains("-h") || rest.contains("--help") {
                StandardStreams.out(runHelp)
                return ExitStatus.ok
            }
            guard rest.isEmpty else { return usageError("run takes no arguments, got \(Printable.escaped(rest.joined(separator: " ")))") }
            return await Daemon.run(environment: environment)
        default:
            guard let type = CommandRunner.command(named: command) else { return usageError("unknown command \"\(Printable.escaped(command))\"") }
            return await CommandRunner.run(type, arguments: rest, environment: environment)
        }
    }

    static let runHelp = """
        Usage: medication-worker [run]

        Runs the daemon: claims DOSE_TAKEN outbox events, sends them to FCM, disables dead tokens, re-checks
        App Store entitlements, serves /healthz, /readyz and /metrics on HEALTH_ADDR, and speaks sd_notify.
        SIGTERM or SIGINT: stops claiming, awaits sends in flight, exits 0 within SHUTDOWN_TIMEOUT.
        Configuration comes from the environment (config/worker.env); check it first with `check-config`.
        """

    static func usageError(_ message: String) -> Int32 {
        printError("medication-worker: \(message)\nTry 'medication-worker --help'.")
        return ExitStatus.usage
    }

    /// A message on stderr, escaped for a terminal (`Printable.lines`): it can quote an argument or a setting's value.
    static func printError(_ message: String) { StandardStreams.error(message) }

    /// Prints every bad setting (and any near-miss variable names) the way `check-config` does, and returns 78.
    static func configurationFailed(_ error: ConfigurationErrors, warnings: [SettingNames.NearMiss] = []) -> Int32 {
        printError((["medication-worker: configuration error: \(error)"] + warnings.map { "warning: \($0)" }).joined(separator: "\n"))
        return ExitStatus.config
    }
}
