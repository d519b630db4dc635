import Foundation
@testable import Postgres
import Testing
import TestSupport

@Suite("Postgres connection", .blockingFixtures)
struct PostgresConnectionTests {
    @Test func parameters_roundTripNullJapaneseAndQuotes() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let tricky = "服薬記録 'single' \"double\" \\ back"
            let rows = try await client.query(
                "SELECT \(tricky)::text AS a, \(PostgresValue.null)::text AS b, \(-42)::bigint AS c, \(true)::boolean AS d, \(["x,y", "z\"q", "服"])::text[] AS e")
            let row = try #require(rows.first)
            #expect(try row["a"].string() == tricky)
            #expect(row["b"].isNull)
            #expect(try row["c"].int() == -42)
            #expect(try row["d"].bool() == true)
            #expect(try row["e"].string() == #"{"x,y","z\"q",服}"#)
        }
    }

    /// Array elements are quoted whole and only `"` and `\` escaped: every element comes back as it was sent,
    /// wherever the specials sit (first, last, doubled, beside multi-byte text), and NULL stays NULL.
    @Test func arrayElements_roundTripQuotesAndBackslashesAnywhere() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let elements = ["", "\"", "\\", "a\"b\\c", "\"\"x\\\\", "end\\", "服\"薬\\", "NULL", "{a,b}", "plain-token:APA91b"]
            let rows = try await client.query("SELECT x FROM unnest(\(elements)::text[]) WITH ORDINALITY AS u(x, n) ORDER BY n")
            #expect(try rows.map { try $0["x"].string() } == elements)
            let optional: [String?] = ["\"q\"", nil, "b\\"]
            let nullable = try await client.query("SELECT x FROM unnest(\(optional)::text[]) WITH ORDINALITY AS u(x, n) ORDER BY n")
            #expect(nullable.map { $0["x"].isNull ? nil : try? $0["x"].string() } == optional)
        }
    }

    /// BEGIN, the settings, the statements and COMMIT in one pipeline: results in order, settings in force inside
    /// the transaction only, a failure rolls everything back and leaves the connection usable. Direct and through PgBouncer.
    @Test(arguments: [false, true]) func pipelinedTransaction_oneRoundTrip_rollsBackOnFailure(throughPooler: Bool) async throws {
        try await TestDatabase.withEmptyDatabase { direct in
            let conninfo = throughPooler ? try TestDatabase.poolerConninfo(direct) : direct
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.query("CREATE TABLE t (id int PRIMARY KEY)")
            let settings = TransactionSettings.worker(statementTimeout: .seconds(7), lockTimeout: .seconds(3), asynchronousCommit: true)
            let results = try connection.pipelinedTransaction(settings: settings, [
                "INSERT INTO t VALUES (\(1)), (\(2)) RETURNING id",
                "SELECT current_setting('statement_timeout') AS st, current_setting('synchronous_commit') AS sc",
            ])
            #expect(try results.count == 2 && results[0].map { try $0["id"].int() } == [1, 2])
            #expect(try results[1][0]["st"].string() == "7s" && results[1][0]["sc"].string() == "off")

            let error = #expect(throws: PostgresError.self) {
                try connection.pipelinedTransaction(settings: settings, [
                    "INSERT INTO t VALUES (\(3))",
                    "INSERT INTO t VALUES (\(1))",  // duplicate key
                    "INSERT INTO t VALUES (\(4))",
                ])
            }
            #expect(error?.sqlState == "23505")
            // The statement repeated in one pipeline was prepared once: PostgreSQL did not refuse a second Parse (42P05).
            if !throughPooler { #expect(connection.usesPreparedStatements) }
            let after = try connection.query("SELECT array_agg(id ORDER BY id)::text AS ids, current_setting('statement_timeout') AS st FROM t")[0]
            #expect(try after["ids"].string() == "{1,2}")  // 3 rolled back, 4 never ran
            #expect(try after["st"].string() == "0")       // the settings ended with their transaction
        }
    }

    /// Pipelined statements with parameters are prepared once per session and then only bound and executed.
    @Test func pipelinedStatements_arePreparedOncePerSession() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.query("CREATE TABLE t (id int PRIMARY KEY)")
            for id in 1...10 { _ = try connection.pipelinedTransaction(["INSERT INTO t VALUES (\(id))"]) }
            #expect(connection.usesPreparedStatements)
            let prepared = try connection.query("SELECT name, statement FROM pg_prepared_statements")
            #expect(prepared.count == 1)
            #expect(try prepared[0]["name"].string() == PostgresConnection.statementName("INSERT INTO t VALUES ($1)") + "_1")
            #expect(try connection.query("SELECT count(*) AS n FROM t")[0]["n"].int() == 10)
        }
    }

    /// A statement is prepared again after 32 executions, then after 64 more, and so on (each preparation lives twice
    /// as long), so its plan is made again from the table sizes of the day: the server's own counters show the
    /// executions of the current preparation only, each under a name of its own, the one before it deallocated.
    @Test func pipelinedStatements_arePreparedAgainAsTheyAge() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.query("CREATE TABLE t (id int PRIMARY KEY)")
            let insert = "INSERT INTO t VALUES ($1)"  // the text of the statement below, which names it
            var names: [String] = []
            func executionsOfCurrentPreparation() throws -> Int {
                let rows = try connection.query("SELECT name, generic_plans + custom_plans AS n FROM pg_prepared_statements")
                #expect(rows.count == 1)
                names.append(try rows[0]["name"].string())
                return try rows[0]["n"].int()
            }
            var id = 0
            func run(_ times: Int) throws {
                for _ in 0..<times { id += 1; _ = try connection.pipelinedTransaction(["INSERT INTO t VALUES (\(id))"]) }
            }
            try run(32)
            #expect(try executionsOfCurrentPreparation() == 32)
            try run(1)
            #expect(try executionsOfCurrentPreparation() == 1)  // the 33rd ran under a new preparation
            try run(63)
            #expect(try executionsOfCurrentPreparation() == 64)
            try run(10)
            #expect(try executionsOfCurrentPreparation() == 10)  // the second lived 64
            #expect(try connection.query("SELECT count(*) AS n FROM t")[0]["n"].int() == 106)
            let base = PostgresConnection.statementName(insert)
            #expect(names == [base + "_1", base + "_2", base + "_2", base + "_3"])
        }
    }

    /// PgBouncer 1.21+ keeps each client's statement names and closes the connection (08P01) when a name is parsed
    /// again: after a failure made PostgreSQL skip a Parse the pooler had already taken, and when a statement is
    /// prepared again as it ages. Neither loses the connection or a write, direct or through the pooler.
    @Test(arguments: [false, true])
    func pipelinedStatements_afterASkippedParseAndAsTheyAge_keepTheConnection(throughPooler: Bool) async throws {
        try await TestDatabase.withEmptyDatabase { direct in
            let conninfo = throughPooler ? try TestDatabase.poolerConninfo(direct) : direct
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.query("CREATE TABLE t (id int PRIMARY KEY)")
            func insert(_ id: Int) -> PostgresQuery { "INSERT INTO t VALUES (\(id))" }
            func other(_ id: Int) -> PostgresQuery { "INSERT INTO t SELECT \(id)::int + 1000" }
            _ = try connection.pipelinedTransaction([insert(1)])
            let error = #expect(throws: PostgresError.self) {
                try connection.pipelinedTransaction([insert(1), other(1)])  // duplicate key first
            }
            #expect(error?.sqlState == "23505")
            // 69 more: both are prepared again after their 32nd executions (`other`'s first Parse was skipped).
            for id in 2...70 { _ = try connection.pipelinedTransaction([insert(id), other(id)]) }
            #expect(connection.isHealthy)
            let counts = try connection.query("SELECT count(*) FILTER (WHERE id <= 70) AS a, count(*) FILTER (WHERE id > 1000) AS b FROM t")[0]
            #expect(try counts["a"].int() == 70 && counts["b"].int() == 69)
            if !throughPooler { #expect(connection.usesPreparedStatements) }
        }
    }

    /// A prepared statement's generic plan outlives the statistics it was made with. Made while the table was empty
    /// (a new or truncated queue table, before autovacuum's first ANALYZE), a keyed UPDATE kept scanning the whole
    /// table once it held thousands of rows; under `forKeyedStatements` it stays an index lookup.
    @Test(arguments: [false, true])
    func keyedStatements_preparedWhileTheTableWasEmpty_stayIndexLookups(keyed: Bool) async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.query("CREATE TABLE t (id text PRIMARY KEY, v int NOT NULL DEFAULT 0) WITH (autovacuum_enabled = off)")
            try connection.query("ANALYZE t")  // as the benchmark and a fresh deployment have it: analyzed while empty
            let base = TransactionSettings.worker(statementTimeout: .seconds(30), lockTimeout: .seconds(3), asynchronousCommit: false)
            let settings = keyed ? base.forKeyedStatements() : base
            func update(_ ids: [String]) -> PostgresQuery { "UPDATE t SET v = v + 1 FROM unnest(\(ids)::text[]) AS u(id) WHERE t.id = u.id" }
            // Enough executions on the empty table for the server to settle on a generic plan.
            for _ in 0..<8 { _ = try connection.pipelinedTransaction(settings: settings, [update(["a", "b"])]) }
            try connection.query("INSERT INTO t (id) SELECT 'k' || g FROM generate_series(1, 20000) g")
            try connection.query("SELECT pg_stat_force_next_flush()")
            let before = try connection.query("SELECT coalesce(seq_tup_read, 0) AS n FROM pg_stat_user_tables WHERE relname = 't'")[0]["n"].int()
            for round in 0..<3 {
                _ = try connection.pipelinedTransaction(settings: settings, [update(["k\(round + 1)", "k\(round + 100)"])])
            }
            try connection.query("SELECT pg_stat_force_next_flush()")
            let after = try connection.query("SELECT coalesce(seq_tup_read, 0) AS n FROM pg_stat_user_tables WHERE relname = 't'")[0]["n"].int()
            let total = try connection.query("SELECT coalesce(sum(v), 0)::int AS n FROM t")[0]["n"].int()
            #expect(total == 6)
            if keyed {
                #expect(after - before == 0)
            } else {
                // The hazard itself, so this test notices if the server stops keeping such plans.
                #expect(after - before >= 20000)
            }
        }
    }

    /// Behind a transaction-mode PgBouncer the server session changes under the client. One that keeps no prepared
    /// statements for its clients (before 1.21, or max_prepared_statements = 0): the transaction that meets a session
    /// without its prepared statement fails before anything is committed, runs again unnamed, and so does everything
    /// after it. One that keeps them (1.21+ by default) prepares them on the new session: they stay in use. Either way
    /// every row is written exactly once.
    @Test(arguments: [false, true])
    func pipelinedStatements_behindAPoolerOnAnotherSession_fallBackWithoutLosingOrRepeatingAWrite(tracked: Bool) async throws {
        try await TestDatabase.withEmptyDatabase { direct in
            let admin = try PostgresConnection(conninfo: direct)
            try admin.query("CREATE TABLE t (id int PRIMARY KEY)")
            let pooledConninfo = try TestDatabase.poolerConninfo(direct, tracked: tracked)
            let pooled = try PostgresConnection(conninfo: pooledConninfo)
            _ = try pooled.pipelinedTransaction(["INSERT INTO t VALUES (\(1))"])
            #expect(pooled.usesPreparedStatements)
            let prepared = try pooled.query("SELECT pg_backend_pid() AS pid")[0]["pid"].int()
            // Another client holds the only server session of this database's pool (the one that has the statement)
            // in a transaction, so the next transaction of `pooled` is handed a new session.
            let holder = try PostgresConnection(conninfo: pooledConninfo)
            try holder.query("BEGIN")
            #expect(try holder.query("SELECT pg_backend_pid() AS pid")[0]["pid"].int() == prepared)
            for id in 2...6 { _ = try pooled.pipelinedTransaction(["INSERT INTO t VALUES (\(id))"]) }
            try holder.query("COMMIT")
            #expect(pooled.usesPreparedStatements == (tracked && TestDatabase.poolerTracksPreparedStatements))
            #expect(try admin.query("SELECT count(*) AS n FROM t")[0]["n"].int() == 6)
        }
    }

    @Test func timestamps_roundTripToTheMicrosecond() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let date = Date(timeIntervalSince1970: 1_770_764_607.123456)
            let rows = try await client.query("SELECT \(date)::timestamptz AS t, '2026-02-11 08:03:27+09'::timestamptz AS u")
            let back = try rows[0]["t"].date()
            #expect(abs(back.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.000_002)
            #expect(try rows[0]["u"].date() == Date(timeIntervalSince1970: 1_770_764_607))
        }
    }

    @Test func failedStatement_carriesSQLStateAndStatementButNotValues() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let error = await #expect(throws: PostgresError.self) {
                try await client.query("SELECT \("7")::int / 0 AS boom")
            }
            #expect(error?.sqlState == "22012")
            #expect(error?.statement?.contains("SELECT $1::int / 0") == true)
            #expect(error?.description.contains("division by zero") == true)
            // The pool stays usable after a statement error.
            let one = try await client.query("SELECT 1 AS one")[0]["one"].int()
            #expect(one == 1)
        }
    }

    @Test func transaction_rollsBackWhenBodyThrows() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            try await client.query("CREATE TABLE t (v text)")
            struct Boom: Error {}
            await #expect(throws: Boom.self) {
                try await client.withTransaction { connection in
                    try connection.query("INSERT INTO t VALUES (\("gone"))")
                    throw Boom()
                }
            }
            try await client.withTransaction { connection in
                try connection.query("INSERT INTO t VALUES (\("kept"))")
            }
            let values = try await client.query("SELECT v FROM t").map { try $0["v"].string() }
            #expect(values == ["kept"])
        }
    }

    @Test func notify_fromAnotherConnectionWakesWaiter_andWaitTimesOutWithoutOne() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let listener = try PostgresConnection(conninfo: conninfo)
            try listener.listen("push_outbox")
            #expect(try listener.waitForNotifications(timeout: .milliseconds(100)).isEmpty)
            let sender = try PostgresConnection(conninfo: conninfo)
            try sender.query("SELECT pg_notify('push_outbox', 'hello')")
            var received: [PostgresConnection.Notification] = []
            for _ in 0..<50 where received.isEmpty {
                received = try listener.waitForNotifications(timeout: .milliseconds(100))
            }
            #expect(received.map(\.payload) == ["hello"])
            #expect(received.first?.channel == "push_outbox")
            #expect(received.first?.senderPID == sender.backendPID)
        }
    }

    @Test func listener_wakesOnNotifyThroughItsThread() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let wakes = AsyncStream<Void>.makeStream()
            let listener = PostgresListener(conninfo: conninfo, channel: "push_outbox", onWake: { wakes.continuation.yield() })
            listener.start()
            defer { listener.stop() }
            var iterator = wakes.stream.makeAsyncIterator()
            await iterator.next()  // the wake after connecting
            try await PostgresClient(conninfo: conninfo).query("SELECT pg_notify('push_outbox', '')")
            let woke: Void? = await iterator.next()
            #expect(woke != nil)
        }
    }

    @Test func badConninfo_failsWithConnectionFailed() throws {
        #expect {
            _ = try PostgresConnection(conninfo: "host=/nonexistent-socket-dir dbname=x connect_timeout=2")
        } throws: { error in
            (error as? PostgresError)?.code == .connectionFailed
        }
    }

    /// A server that accepts TCP and never answers (the kernel completes the handshake; nobody reads):
    /// the connection attempt fails with libpq's connect timeout instead of waiting for minutes.
    @Test func serverThatNeverAnswers_failsTheConnectionWithinTheDefaultTimeout() throws {
        let server = LoopbackSocket()
        defer { server.close() }
        let port = server.port
        let error = #expect(throws: PostgresError.self) {
            _ = try PostgresConnection(conninfo: "host=127.0.0.1 port=\(port) user=nobody dbname=nothing sslmode=disable")
        }
        #expect(error?.code == .connectionFailed)
        #expect(error?.message.contains("timeout") == true, "\(error?.message ?? "")")
    }

    /// The operator's conninfo wins over the built-in bounded waits.
    @Test func conninfoSettings_overrideTheDefaults() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo + " application_name=mw-test connect_timeout=7")
            #expect(try connection.query("SELECT current_setting('application_name') AS a")[0]["a"].string() == "mw-test")
        }
    }
}
