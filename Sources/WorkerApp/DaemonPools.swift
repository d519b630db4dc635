import Postgres
import WorkerConfig

/// The daemon's PostgreSQL pools, built once and closed after the services stopped.
struct DaemonPools: Sendable {
    /// Two claimers, the completer and the lease heartbeat; each holds a connection only for one statement or transaction.
    let pipeline: PostgresClient
    /// Retention and the status gauges: short statements, off the pipeline's connections.
    let maintenance: PostgresClient

    init(configuration: Configuration) {
        // Every transaction carries its settings (pooler-safe: nothing is set on the session), among them
        // synchronous_commit=off for the pipeline's own writes: a worker crash loses nothing (commits are in
        // PostgreSQL), and a PostgreSQL crash can only forget that a push went out, so it is sent again
        // (a duplicate, never a loss: the API's outbox INSERT keeps its own durable commit).
        let statementTimeout = configuration.databaseStatementTimeout
        let settings = TransactionSettings.worker(statementTimeout: statementTimeout, lockTimeout: Daemon.lockTimeout,
                                                  asynchronousCommit: true)
        // A server that stops answering never enforces statement_timeout: the pools end such calls themselves.
        let deadline = statementTimeout + statementTimeout / 2
        pipeline = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 6, settings: settings, queryDeadline: deadline)
        maintenance = PostgresClient(conninfo: configuration.databaseURL, maxConnections: 2, settings: settings, queryDeadline: deadline)
    }

    /// Closes the idle connections (after every service returned).
    func close() async {
        await pipeline.close()
        await maintenance.close()
    }
}
