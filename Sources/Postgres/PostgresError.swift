/// An error from the Postgres module. The description names the SQLSTATE, the server's
/// message and the statement, never the bound parameter values.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// Coarse kind of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// Could not open a connection (bad conninfo, server down, auth).
        public static let connectionFailed = Code("connectionFailed")
        /// The connection broke during the call; the next call reconnects.
        public static let connectionLost = Code("connectionLost")
        /// The server rejected the statement (see `sqlState`).
        public static let queryFailed = Code("queryFailed")
        /// A value could not be decoded as the requested type.
        public static let decodingFailed = Code("decodingFailed")
    }

    public var code: Code
    /// Five-character SQLSTATE when the server sent one (e.g. `23505`).
    public var sqlState: String?
    /// The server's (or libpq's) primary message.
    public var message: String
    /// The SQL text that failed, with placeholders, never values.
    public var statement: String?

    public init(_ code: Code, message: String, sqlState: String? = nil, statement: String? = nil) {
        self.code = code
        self.message = message
        self.sqlState = sqlState
        self.statement = statement
    }

    /// True when retrying on a new connection may succeed (connection-class SQLSTATE 08xxx,
    /// admin shutdown 57P01, or the socket went away), and 25006 (read-only transaction): after a failover a
    /// pooled connection may still reach the old primary, now a standby, while `target_session_attrs=read-write`
    /// sends a new connection to the promoted one.
    public var isConnectionError: Bool {
        code == .connectionFailed || code == .connectionLost
            || (sqlState?.hasPrefix("08") ?? false) || sqlState == "57P01" || sqlState == "57P02" || sqlState == "57P03"
            || sqlState == "25006"
    }

    /// SQLSTATEs after which the same statement may succeed if simply run again: a deadlock or serialization failure
    /// (40P01, 40001), a lock wait that timed out (55P03), a statement past `statement_timeout` or cancelled (57014).
    /// Nothing about the statement itself was wrong; the database could not finish it this time.
    public static let transientSQLStates: Set<String> = ["40P01", "40001", "55P03", "57014"]

    /// The SQLSTATE is one of `transientSQLStates`.
    public var isTransient: Bool { sqlState.map(Self.transientSQLStates.contains) ?? false }

    /// The kind and SQLSTATE only (`postgres connectionFailed [08006]`), for places that face a network such as
    /// `/readyz`: libpq's and the server's text can name hosts, users and parts of a connection string.
    public var summary: String {
        var text = "postgres \(code)"
        if let sqlState {
            text += " [\(sqlState)]"
            if let meaning = Self.meanings[sqlState] { text += " \(meaning)" }
        }
        return text
    }

    /// Our own words for the SQLSTATEs an operator meets at readiness (never the server's text).
    static let meanings = ["25006": "read-only (a standby, or default_transaction_read_only)", "28000": "authorization refused",
                           "28P01": "password refused", "3D000": "no such database", "42501": "permission denied",
                           "53300": "too many connections", "57P01": "server shutting down", "57P03": "server starting up"]

    public var description: String {
        var text = "postgres \(code)"
        if let sqlState { text += " [\(sqlState)]" }
        text += ": \(message)"
        if let statement {
            let compact = statement.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            text += " (statement: \(compact.prefix(200)))"
        }
        return text
    }
}
