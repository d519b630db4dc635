import FoundationEssentials
import Timekeeping

/// Run-time parameters for one transaction, sent as `set_config(name, value, true)` in the same
/// round trip as its `BEGIN`. They end with the transaction, so nothing is left on a server
/// connection that a transaction-mode pooler hands to another client next.
public struct TransactionSettings: Sendable, Equatable {
    /// Parameter names and values, applied in this order.
    public let values: [(name: String, value: String)]
    /// `SELECT set_config(…, true), …` for every setting, built once: it goes out with every transaction.
    let selectStatement: String
    /// The transaction's `BEGIN`, with the isolation level the statements rely on when they name one.
    let begin: String

    /// No settings: a plain `BEGIN`.
    public static let none = TransactionSettings(values: [])

    /// `isolation`: `READ COMMITTED` where correctness depends on each statement seeing what committed before it (an
    /// advisory lock that orders a count, `SKIP LOCKED` claims), whatever `default_transaction_isolation` the
    /// database or the role was given; nil: the server's default.
    public init(values: [(name: String, value: String)], isolation: String? = nil) {
        self.init(values: values, begin: isolation.map { "BEGIN ISOLATION LEVEL \($0)" } ?? "BEGIN")
    }

    private init(values: [(name: String, value: String)], begin: String) {
        self.values = values
        self.begin = begin
        selectStatement = "SELECT " + values.map { "set_config(\(Self.literal($0.name)), \(Self.literal($0.value)), true)" }
            .joined(separator: ", ")
    }

    /// The settings the worker's own statements run with:
    /// - `statement_timeout`: a statement that runs away (a plan gone wrong, a table bloated) fails
    ///   instead of holding a connection and its locks;
    /// - `lock_timeout`: a statement waiting behind the API's locks gives up and is retried later,
    ///   instead of making the API's next statements queue behind it;
    /// - `synchronous_commit=off` when asked (see the daemon's wiring for why that is safe);
    /// - `DateStyle` ISO and `TimeZone` UTC, so timestamps come back in the one shape the row decoder reads.
    public static func worker(statementTimeout: Duration, lockTimeout: Duration, asynchronousCommit: Bool) -> TransactionSettings {
        var values: [(name: String, value: String)] = [
            ("statement_timeout", "\(statementTimeout.wholeMilliseconds)ms"),
            ("lock_timeout", "\(lockTimeout.wholeMilliseconds)ms"),
            ("DateStyle", "ISO, YMD"), ("TimeZone", "UTC"),
        ]
        if asynchronousCommit { values.append(("synchronous_commit", "off")) }
        // Every claim, lease and count of the worker is written for READ COMMITTED: a role or database defaulting to
        // REPEATABLE READ would fail its SKIP LOCKED updates and let the unwitnessed-disable count read a stale snapshot.
        return TransactionSettings(values: values, isolation: "READ COMMITTED")
    }

    /// These settings plus `enable_seqscan=off`, for transactions whose statements find every row by a key (the
    /// primary key or a unique index). A prepared statement's generic plan is made once per connection and kept; made
    /// while the statistics still call a new or emptied queue table tiny (before autovacuum's first ANALYZE), it scans
    /// the whole table on every execution for the connection's life (seen: the completer's flush reading 36,000 rows
    /// to update 100). Off, the planner takes the index whatever the statistics say. Only for keyed statements: where
    /// no index serves, a statement scans all the same, at a cost estimate that misleads the rest of its plan.
    public func forKeyedStatements() -> TransactionSettings {
        TransactionSettings(values: values + [("enable_seqscan", "off")], begin: begin)
    }

    /// These settings plus `plan_cache_mode=force_generic_plan`, for small statements run many times a second (the
    /// completer's flush, the lease heartbeat). Left to choose, PostgreSQL compares the generic plan (costed for ten
    /// rows per `unnest`) with the custom plans of flushes of one or two items and then plans every execution afresh:
    /// 0.32 ms of planning per flush, 65 µs of PostgreSQL's CPU per delivery with two paced instances. The generic
    /// plan's table sizes stay recent because statements are prepared again as they age
    /// (`PostgresConnection.PreparedStatement`). Which statements take it is declared beside each one
    /// (`PlanPolicy`).
    public func forFrequentStatements() -> TransactionSettings {
        TransactionSettings(values: values + [("plan_cache_mode", "force_generic_plan")], begin: begin)
    }

    public var isEmpty: Bool { values.isEmpty }

    /// `BEGIN` followed by the settings (simple protocol, one round trip).
    var beginStatement: String {
        values.isEmpty ? begin : begin + "; " + selectStatement
    }

    private static func literal(_ text: String) -> String {
        "'" + text.replacing("'", with: "''") + "'"
    }

    public static func == (lhs: TransactionSettings, rhs: TransactionSettings) -> Bool {
        lhs.begin == rhs.begin && lhs.values.map(\.name) == rhs.values.map(\.name) && lhs.values.map(\.value) == rhs.values.map(\.value)
    }
}
