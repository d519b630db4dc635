/// Entry point of the daemon's CLI.
public enum WorkerApp {
    /// Runs the CLI with the process arguments and environment; returns the exit status.
    public static func main(arguments: [String], environment: [String: String]) async -> Int32 {
        0
    }
}
