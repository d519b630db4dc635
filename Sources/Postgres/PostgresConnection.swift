import CLibPQ
import FoundationEssentials
import Glibc
import TextSupport
import Timekeeping

/// One libpq connection. Not thread-safe: `PostgresClient` confines each connection to a
/// serial queue, and `PostgresListener` to its own thread. Calls block; never make them on
/// Swift's cooperative pool.
public final class PostgresConnection {
    private let raw: OpaquePointer

    /// Bounded waits for every connection unless the conninfo sets its own (docs/operations.md, "A database
    /// that hangs"): a server that accepts TCP and never answers fails the connection attempt after
    /// `connect_timeout`; a peer that silently vanishes is found by keepalives, and data it stops
    /// acknowledging drops the connection after `tcp_user_timeout` milliseconds.
    public static let boundedWaits: [(String, String)] = [
        ("connect_timeout", "5"), ("keepalives", "1"), ("keepalives_idle", "10"), ("keepalives_interval", "5"),
        ("keepalives_count", "3"), ("tcp_user_timeout", "20000"),
    ]

    /// Opens a connection from a libpq conninfo string or `postgresql://` URI.
    ///
    /// Nothing is set on the session: behind a transaction-mode pooler (PgBouncer, Supavisor) a
    /// session setting would stay on a server connection that other clients, the web API among
    /// them, are handed next. Settings belong to transactions (`withTransaction(settings:)`).
    ///
    /// `preparedStatements`: whether `pipelinedTransaction` may keep named prepared statements in the session
    /// (it finds out by itself when a pooler makes that impossible, and stops).
    public init(conninfo: String, preparedStatements: Bool = true) throws(PostgresError) {
        // The defaults come first and `dbname` (the whole conninfo, expanded) after them: "values that
        // appear later ... override earlier ones", so anything the operator wrote wins (libpq docs,
        // PQconnectdbParams with expand_dbname).
        let pairs = Self.boundedWaits + [("dbname", conninfo)]
        // "Note that ... you should call PQfinish when you are finished with it ... even if the
        // backend connection attempt fails" (libpq docs, PQconnectdb).
        let opened: OpaquePointer? = withCStringArray(pairs.map { Array($0.0.utf8CString).map { UInt8(bitPattern: $0) } }) { keywords in
            withCStringArray(pairs.map { Array($0.1.utf8CString).map { UInt8(bitPattern: $0) } }) { values in
                (keywords + [nil]).withUnsafeBufferPointer { keywordPointers in
                    (values + [nil]).withUnsafeBufferPointer { valuePointers in
                        PQconnectdbParams(keywordPointers.baseAddress, valuePointers.baseAddress, 1)
                    }
                }
            }
        }
        guard let connection = opened else {
            throw PostgresError(.connectionFailed, message: "libpq could not allocate a connection")
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            // libpq quotes the part of a connection string it cannot parse, a password included: never repeated as is.
            let message = SecretRedaction.conninfo(PostgresConnection.errorText(connection))
            PQfinish(connection)
            throw PostgresError(.connectionFailed, message: message)
        }
        raw = connection
        usesPreparedStatements = preparedStatements
        // Server NOTICEs (e.g. "already exists, skipping") would go to stderr by default; drop them.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit { PQfinish(raw) }

    /// True while libpq considers the connection usable.
    public var isHealthy: Bool { PQstatus(raw) == CONNECTION_OK }

    /// The connection's socket descriptor (-1 when none).
    public var socket: Int32 { PQsocket(raw) }

    /// The server process id serving this connection (for tests and diagnostics).
    public var backendPID: Int { Int(PQbackendPID(raw)) }

    /// Runs one statement, its interpolated values bound as `$1…$n`, through `PQexecParams` (text format).
    @discardableResult
    public func query(_ query: PostgresQuery) throws(PostgresError) -> PostgresRows {
        let buffers = query.binds.map(\.wireBytes)
        let result: OpaquePointer? = withCStringArray(buffers) { pointers in
            PQexecParams(raw, query.sql, Int32(pointers.count), nil, pointers, nil, nil, 0)
        }
        return try rows(of: result, sql: query.sql)
    }

    /// Runs a script through the simple query protocol (`PQexec`): several statements separated by semicolons (one
    /// implicit transaction unless the script controls its own), e.g. `sql/roles.sql`. It cannot bind values: a script
    /// with an interpolated value fails without being sent. Only the last statement's rows are returned.
    @discardableResult
    public func executeScript(_ script: PostgresQuery) throws(PostgresError) -> PostgresRows {
        guard script.binds.isEmpty else {
            throw PostgresError(.queryFailed, message: "a script cannot bind values (\(script.binds.count) interpolated)", statement: script.sql)
        }
        return try runScript(script.sql)
    }

    /// `PQexec` of text this file builds (BEGIN with settings, ROLLBACK, DEALLOCATE ALL).
    @discardableResult
    private func runScript(_ sql: String) throws(PostgresError) -> PostgresRows {
        try rows(of: PQexec(raw, sql), sql: sql)
    }

    /// The rows of a finished statement, or its error (SQLSTATE and primary message, never parameter values); clears the result.
    private func rows(of result: OpaquePointer?, sql: String) throws(PostgresError) -> PostgresRows {
        guard let result else {
            throw PostgresError(isHealthy ? .queryFailed : .connectionLost, message: PostgresConnection.errorText(raw), statement: sql)
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return PostgresConnection.copyRows(result)
        default:
            let sqlState = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
            throw PostgresError(isHealthy ? .queryFailed : .connectionLost, message: primary ?? PostgresConnection.errorText(raw),
                                sqlState: sqlState, statement: sql)
        }
    }

    /// Named prepared statements of this session, by SQL text: parsed and planned once (a generic plan after
    /// PostgreSQL's five custom ones), then only bound and executed. Used by `pipelinedTransaction`.
    private var preparedNames: [String: PreparedStatement] = [:]
    /// Parse messages sent on this connection; numbers each preparation's name, as no name is ever parsed twice.
    private var preparations = 0
    /// Names of replaced preparations whose DEALLOCATE has not run yet (its pipeline failed first): sent again.
    private var retiredNames: [String] = []

    /// One named statement of this session and how long it has left.
    ///
    /// A generic plan is made from the table sizes of its moment and kept as long as the statement lives: one made
    /// while a queue table was new or emptied calls it tiny, and on a table that has grown since it walks the whole
    /// table per execution (measured: the completion statement walking 14,500 primary-key entries to update 78 rows
    /// ten seconds after a start on an empty queue, latency climbing 1 ms every 2 s until autovacuum's ANALYZE).
    /// So a statement is prepared again after `lifetime` executions, and each preparation lives twice as long as the
    /// one before (`firstLifetime`, doubling up to `maxLifetime`): a plan is never older than the last doubling of
    /// the work, for about five extra plannings per doubling.
    ///
    /// Each preparation has a name of its own: PgBouncer 1.21+ keeps a client's names for it and closes the connection
    /// (08P01) when one is parsed again, even after PostgreSQL skipped or rejected the first Parse, or after an SQL
    /// `DEALLOCATE` it does not see.
    struct PreparedStatement {
        let name: String
        var executions = 0
        let lifetime: Int

        static let firstLifetime = 32
        static let maxLifetime = 65_536

        var isDue: Bool { executions >= lifetime }
        var nextLifetime: Int { min(lifetime * 2, Self.maxLifetime) }
    }
    /// True until the server shows that sessions are not ours to keep statements in: a statement prepared earlier
    /// is missing, or a name is already taken (a transaction-mode pooler hands each transaction whatever server
    /// session is free). Unnamed statements from then on; the transaction that showed it is run again unnamed.
    public private(set) var usesPreparedStatements: Bool
    /// At most this many statements are kept prepared per session; others run unnamed.
    public static let maxPreparedStatements = 64

    /// SQLSTATEs that say a named statement is not where this session left it: 26000 (prepared statement does not
    /// exist) and 42P05 (prepared statement already exists).
    static let poolerSignals: Set<String> = ["26000", "42P05"]

    /// Runs independent statements in one transaction with `settings`, in one round trip: `BEGIN`,
    /// the settings, every statement and `COMMIT` go out together as a libpq pipeline, then the
    /// answers are read. Returns each statement's rows in order. The first failure rolls the whole
    /// transaction back and is thrown (what follows it in the pipeline is not run).
    ///
    /// Statements with parameters run as named prepared statements (prepared in the same pipeline the first time
    /// this session sees them), so the hot statements are not parsed and planned on every call. Behind a
    /// transaction-mode pooler that does not track them, the first transaction that meets another server session
    /// fails before anything is committed and is run again unnamed, as is everything after it.
    ///
    /// For statements whose parameters do not depend on each other's results (a completer flush, a
    /// claim); everything else uses `withTransaction`.
    public func pipelinedTransaction(settings: TransactionSettings = .none,
                                     _ queries: [PostgresQuery]) throws(PostgresError) -> [PostgresRows] {
        let statements = queries.map { (sql: $0.sql, parameters: $0.binds) }
        if usesPreparedStatements {
            do {
                return try pipeline(settings: settings, statements, prepared: true)
            } catch let error where error.sqlState.map(Self.poolerSignals.contains) == true && isHealthy {
                usesPreparedStatements = false
                preparedNames.removeAll()
                retiredNames.removeAll()
            } catch let error where error.sqlState == "0A000" && error.message.contains("cached plan") && isHealthy {
                // "cached plan must not change result type": a table changed under a prepared statement. Start afresh
                // (not `DEALLOCATE ALL`: behind a pooler it would drop statements the pooler keeps for other clients).
                retiredNames += preparedNames.values.map(\.name)
                preparedNames.removeAll()
            }
        }
        return try pipeline(settings: settings, statements, prepared: false)
    }

    /// What one pipelined command answers for.
    private enum Step {
        case deallocate(name: String)
        case prepare(sql: String, name: String, lifetime: Int)
        case statement(index: Int, prepared: Bool)
    }

    private func pipeline(settings: TransactionSettings, _ statements: [(sql: String, parameters: [PostgresValue])],
                          prepared: Bool) throws(PostgresError) -> [PostgresRows] {
        guard PQenterPipelineMode(raw) == 1 else {
            throw PostgresError(isHealthy ? .queryFailed : .connectionLost, message: PostgresConnection.errorText(raw), statement: "BEGIN")
        }
        var queued: [(sql: String, parameters: [PostgresValue])] = [(settings.begin, [])]
        if !settings.isEmpty { queued.append((settings.selectStatement, [])) }
        let first = queued.count
        queued += statements
        queued.append(("COMMIT", []))
        var steps: [Step] = []
        var parsedHere: [String: String] = [:]
        var failure: PostgresError?
        for (index, statement) in queued.enumerated() {
            if let error = send(statement, index: index, prepared: prepared, parsedHere: &parsedHere, into: &steps) {
                failure = error
                break
            }
        }
        // After the COMMIT, so that a name the server does not have (a pooler renames statements) fails nothing.
        let replaced = parsedHere.keys.compactMap { preparedNames[$0]?.name }
        for name in prepared && failure == nil ? retiredNames + replaced : [] {
            guard PQsendQueryParams(raw, "DEALLOCATE \(name)", 0, nil, nil, nil, nil, 0) == 1 else {
                failure = PostgresError(.connectionLost, message: PostgresConnection.errorText(raw), statement: "DEALLOCATE")
                break
            }
            steps.append(.deallocate(name: name))
        }
        if failure == nil, PQpipelineSync(raw) != 1 {
            failure = PostgresError(.connectionLost, message: PostgresConnection.errorText(raw), statement: "SYNC")
        }
        var results: [PostgresRows] = []
        if failure == nil {
            failure = readAnswers(to: steps, of: queued) { index, rows in
                if index >= first, index < queued.count - 1 { results.append(rows) }
            }
        }
        _ = PQexitPipelineMode(raw)
        if let failure {
            if isHealthy, PQtransactionStatus(raw) != PQTRANS_IDLE { _ = try? runScript("ROLLBACK") }
            throw failure
        }
        return results
    }

    /// Queues one statement of a pipeline: named when `prepared` and it has parameters (prepared first, under a new
    /// name, if neither this session nor this pipeline has prepared it, or once it is due), unnamed otherwise. Returns
    /// the error if libpq refused.
    private func send(_ statement: (sql: String, parameters: [PostgresValue]), index: Int, prepared: Bool,
                      parsedHere: inout [String: String], into steps: inout [Step]) -> PostgresError? {
        let refused = { PostgresError(.connectionLost, message: PostgresConnection.errorText(self.raw), statement: statement.sql) }
        let buffers = statement.parameters.map(\.wireBytes)
        let named = prepared && !statement.parameters.isEmpty
        let cached = named ? preparedNames[statement.sql] : nil
        var name = named ? parsedHere[statement.sql] ?? cached.flatMap { $0.isDue ? nil : $0.name } : nil
        if named, name == nil, cached != nil || preparedNames.count + parsedHere.count < Self.maxPreparedStatements {
            // Planned again from today's table sizes when due; the old name is deallocated after the COMMIT.
            preparations += 1
            let fresh = Self.statementName(statement.sql) + "_\(preparations)"
            guard PQsendPrepare(raw, fresh, statement.sql, Int32(buffers.count), nil) == 1 else { return refused() }
            steps.append(.prepare(sql: statement.sql, name: fresh, lifetime: cached?.nextLifetime ?? PreparedStatement.firstLifetime))
            parsedHere[statement.sql] = fresh
            name = fresh
        }
        let accepted = withCStringArray(buffers) { pointers in
            if let name {
                PQsendQueryPrepared(raw, name, Int32(pointers.count), pointers, nil, nil, 0)
            } else {
                PQsendQueryParams(raw, statement.sql, Int32(pointers.count), nil, pointers, nil, nil, 0)
            }
        }
        guard accepted == 1 else { return refused() }
        steps.append(.statement(index: index, prepared: name != nil))
        return nil
    }

    /// Reads one answer per queued step, then the sync point's, keeping the session's statement book (prepared,
    /// deallocated, executions) as the answers confirm it; hands each statement's rows to `rows`. Returns the first
    /// failure (the rest of an aborted pipeline answers "aborted" and is skipped).
    private func readAnswers(to steps: [Step], of queued: [(sql: String, parameters: [PostgresValue])],
                             rows deliver: (Int, PostgresRows) -> Void) -> PostgresError? {
        var failure: PostgresError?
        for step in steps {
            let sql: String
            switch step {
            case .deallocate(let name): sql = "DEALLOCATE \(name)"
            case .prepare(let text, _, _): sql = text
            case .statement(let index, _): sql = queued[index].sql
            }
            // Each queued command answers with one result, then NULL.
            let result = PQgetResult(raw)
            defer { while let extra = PQgetResult(raw) { PQclear(extra) } }
            guard let result else {
                failure = failure ?? PostgresError(.connectionLost, message: PostgresConnection.errorText(raw), statement: sql)
                break
            }
            if PQresultStatus(result) == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                continue
            }
            if case .deallocate(let name) = step {
                // Done either way: deallocated, or not on this server session (a pooler that renames statements).
                PQclear(result)
                retiredNames.removeAll { $0 == name }
                continue
            }
            do {
                let rows = try self.rows(of: result, sql: sql)
                switch step {
                case .deallocate: break
                case .prepare(let text, let name, let lifetime):
                    if let old = preparedNames[text]?.name { retiredNames.append(old) }
                    preparedNames[text] = PreparedStatement(name: name, lifetime: lifetime)
                case .statement(let index, let prepared):
                    if prepared { preparedNames[queued[index].sql]?.executions += 1 }
                    deliver(index, rows)
                }
            } catch {
                failure = failure ?? error
            }
        }
        // The sync point's own result.
        if let sync = PQgetResult(raw) { PQclear(sync) }
        return failure
    }

    /// `mw_` and a 64-bit FNV-1a hash of the text, the prefix of every name the statement is prepared under (so a
    /// pooler's shared server session never holds two texts under one name).
    static func statementName(_ sql: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in sql.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "mw_" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Runs `body` inside BEGIN … COMMIT; any thrown error rolls back and is rethrown.
    /// `settings` apply to this transaction only (`SET LOCAL`) and travel with the BEGIN in one round trip.
    @discardableResult
    public func withTransaction<T>(settings: TransactionSettings = .none, _ body: (PostgresConnection) throws -> T) throws -> T {
        try runScript(settings.beginStatement)
        do {
            let value = try body(self)
            try query("COMMIT")
            return value
        } catch {
            if isHealthy { _ = try? query("ROLLBACK") }
            throw error
        }
    }

    /// `LISTEN` on a channel (the name is quoted as an identifier).
    public func listen(_ channel: String) throws(PostgresError) {
        try query("LISTEN \(unescaped: PostgresConnection.quoteIdentifier(channel))")
    }

    /// A notification received through LISTEN.
    public struct Notification: Sendable, Equatable {
        public var channel: String
        public var payload: String
        public var senderPID: Int
    }

    /// Waits up to `timeout` for notifications by polling the socket; returns those that
    /// arrived (empty on timeout). Throws `connectionLost` when the socket breaks.
    public func waitForNotifications(timeout: Duration) throws(PostgresError) -> [Notification] {
        var pending = try drainNotifications()
        if !pending.isEmpty { return pending }
        let socket = PQsocket(raw)
        guard socket >= 0 else { throw PostgresError(.connectionLost, message: "connection has no socket") }
        var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        let millis = Int32(clamping: timeout.wholeMilliseconds)
        let ready = poll(&descriptor, 1, millis)
        if ready < 0, errno != EINTR {
            throw PostgresError(.connectionLost, message: "poll failed: \(String(cString: strerror(errno)))")
        }
        if ready > 0 { pending = try drainNotifications() }
        return pending
    }

    private func drainNotifications() throws(PostgresError) -> [Notification] {
        // "PQconsumeInput normally returns 1 indicating no error, but returns 0 if there was some
        // kind of trouble" (libpq docs); after that the connection is unusable.
        guard PQconsumeInput(raw) == 1 else {
            throw PostgresError(.connectionLost, message: PostgresConnection.errorText(raw))
        }
        var found: [Notification] = []
        while let notify = PQnotifies(raw) {
            let item = notify.pointee
            found.append(Notification(channel: String(cString: item.relname),
                                      payload: item.extra.map { String(cString: $0) } ?? "",
                                      senderPID: Int(item.be_pid)))
            PQfreemem(notify)
        }
        if !isHealthy { throw PostgresError(.connectionLost, message: PostgresConnection.errorText(raw)) }
        return found
    }

    /// Quotes an SQL identifier (`"name"` with inner quotes doubled).
    public static func quoteIdentifier(_ name: String) -> String {
        "\"" + name.replacing("\"", with: "\"\"") + "\""
    }

    private static func errorText(_ connection: OpaquePointer) -> String {
        guard let text = PQerrorMessage(connection) else { return "unknown libpq error" }
        let message = String(cString: text).trimmingWhitespace()
        return message.isEmpty ? "connection closed" : message.replacing("\n", with: "; ")
    }

    private static func copyRows(_ result: OpaquePointer) -> PostgresRows {
        let rowCount = Int(PQntuples(result))
        let columnCount = Int(PQnfields(result))
        let columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        var values: [[String?]] = []
        values.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var cells: [String?] = []
            cells.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    cells.append(nil)
                } else {
                    let length = Int(PQgetlength(result, Int32(row), Int32(column)))
                    let pointer = PQgetvalue(result, Int32(row), Int32(column))!
                    cells.append(pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
                        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
                    })
                }
            }
            values.append(cells)
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresRows(columns: columns, values: values, affectedRows: affected)
    }
}

/// Calls `body` with a C array pointing into NUL-terminated byte buffers (NULL entries for nil), valid for the call only.
private func withCStringArray<R>(_ buffers: [[UInt8]?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    var pointers: [UnsafePointer<CChar>?] = []
    pointers.reserveCapacity(buffers.count)
    func bind(_ index: Int) -> R {
        guard index < buffers.count else { return body(pointers) }
        guard let buffer = buffers[index] else {
            pointers.append(nil)
            return bind(index + 1)
        }
        return buffer.withUnsafeBufferPointer { bytes in
            bytes.baseAddress!.withMemoryRebound(to: CChar.self, capacity: bytes.count) { pointer in
                pointers.append(pointer)
                return bind(index + 1)
            }
        }
    }
    return bind(0)
}
