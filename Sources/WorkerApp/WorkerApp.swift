import Crypto
import FoundationEssentials
import Glibc
import Logging
import Outbox
import Postgres
import Schema
import WorkerConfig

/// The daemon's command line: `run` (default), `migrate`, `check-config`, `status`, `redrive`.
public enum WorkerApp {
    /// The program version printed by `--version`.
    public static let version = "0.1.0"

    /// sysexits.h statuses the CLI uses.
    public enum ExitStatus {
        public static let ok: Int32 = 0
        public static let failure: Int32 = 1
        public static let usage: Int32 = 64
        public static let config: Int32 = ConfigurationError.exitStatus
    }

    public static let usage = """
        Usage: medication-worker [COMMAND] [OPTIONS]

        Delivers DOSE_TAKEN outbox events as FCM pushes and re-checks App Store entitlements.

        Commands:
          run             Run the daemon (default).
          migrate         Apply the worker's database migrations (idempotent).
          check-config    Validate the configuration and print it, secrets redacted.
          status          Show backlog, dead and expired events, recent deliveries, table sizes.
          redrive         Make every DEAD event PENDING again; --event ID for one.

        Options:
          -h, --help      Show this help.
          --version       Show the version.

        Configuration comes from the environment; see config/worker.env.
        Exit status: 0 ok, 1 runtime failure, 64 usage error, 78 configuration error.
        """

    /// Runs the CLI; returns the exit status.
    public static func main(arguments: [String], environment: [String: String]) async -> Int32 {
        // Before anything touches OpenSSL (a key file, libpq, libcurl): threads still closing connections when
        // `exit` runs must not find OpenSSL's locks freed under them.
        OpenSSLProcess.keepStateUntilExit()
        var rest = Array(arguments.dropFirst())
        if rest.contains("-h") || rest.contains("--help") || rest.first == "help" {
            print(usage)
            return ExitStatus.ok
        }
        if rest.contains("--version") {
            print("medication-worker \(version)")
            return ExitStatus.ok
        }
        let command = rest.isEmpty || rest[0].hasPrefix("-") ? "run" : rest.removeFirst()
        switch command {
        case "run":
            guard rest.isEmpty else { return usageError("run takes no arguments, got \(rest.joined(separator: " "))") }
            return await Daemon.run(environment: environment)
        case "migrate":
            guard rest.isEmpty else { return usageError("migrate takes no arguments") }
            return await Commands.migrate(environment: environment)
        case "check-config":
            guard rest.isEmpty else { return usageError("check-config takes no arguments") }
            return Commands.checkConfig(environment: environment)
        case "status":
            guard rest.isEmpty else { return usageError("status takes no arguments") }
            return await Commands.status(environment: environment)
        case "pgbench-script":
            // Undocumented: the benchmark's SQL ceiling runs the pipeline's own statements.
            let size = rest.count == 2 && rest[0] == "--batch" ? Int(rest[1]) ?? 100 : 100
            print(PgbenchScript.script(batchSize: size), terminator: "")
            return ExitStatus.ok
        case "claim-sql":
            // Undocumented: the claim statement, for scripts/claim-plan.
            print(PgbenchScript.claimSQL)
            return ExitStatus.ok
        case "redrive":
            var eventId: Int64?
            if !rest.isEmpty {
                guard rest.count == 2, rest[0] == "--event", let id = Int64(rest[1]), id > 0 else {
                    return usageError("redrive takes no arguments or --event ID (a positive integer)")
                }
                eventId = id
            }
            return await Commands.redrive(environment: environment, eventId: eventId)
        default:
            return usageError("unknown command \"\(command)\"")
        }
    }

    static func usageError(_ message: String) -> Int32 {
        printError("medication-worker: \(message)\nTry 'medication-worker --help'.")
        return ExitStatus.usage
    }

    /// One line on stderr.
    static func printError(_ message: String) {
        var line = message + "\n"
        line.withUTF8 { bytes in _ = write(STDERR_FILENO, bytes.baseAddress, bytes.count) }
    }

    /// Prints a configuration error the way every command does, and returns 78.
    static func configurationFailed(_ error: ConfigurationError) -> Int32 {
        printError("medication-worker: configuration error: \(error)")
        return ExitStatus.config
    }
}
