import Foundation
import Logging
import WorkerConfig

/// `medication-worker run`: wires configuration, database, FCM, health and the loops.
enum Daemon {
    /// Loads and fully validates the configuration, including credential files.
    static func loadConfiguration(environment: [String: String]) throws(ConfigurationError) -> Configuration {
        try Configuration.load(from: environment)
    }

    static func run(environment: [String: String]) async -> Int32 {
        let configuration: Configuration
        do { configuration = try loadConfiguration(environment: environment) } catch {
            return WorkerApp.configurationFailed(error)
        }
        _ = configuration
        return WorkerApp.ExitStatus.ok
    }
}
