import FoundationEssentials
import Postgres
import WorkerConfig

/// What a command runs with: the environment it was started with, and the database when it needs one.
public struct CommandContext: Sendable {
    public let environment: [String: String]

    public init(environment: [String: String]) { self.environment = environment }

    /// The settings the database commands need (`DATABASE_URL`, `EVENT_MAX_AGE`), checked as `run` checks them.
    public func databaseSettings() throws(ConfigurationErrors) -> Configuration.OperatorSettings {
        try Configuration.loadOperatorSettings(from: environment)
    }

    /// Runs `body` with a one-connection client to `DATABASE_URL`, closed afterwards.
    public func withDatabase<T: Sendable>(_ body: (PostgresClient, Configuration.OperatorSettings) async throws -> T) async throws -> T {
        let settings = try databaseSettings()
        let client = PostgresClient(conninfo: settings.databaseURL, maxConnections: 1,
                                    settings: .worker(statementTimeout: settings.statementTimeout, lockTimeout: .seconds(5),
                                                      asynchronousCommit: false))
        do {
            let result = try await body(client, settings)
            await client.close()
            return result
        } catch {
            await client.close()
            throw error
        }
    }
}
