import Foundation
import Postgres
import Testing
import TestSupport

@Suite("Postgres query type")
struct PostgresQueryTests {
    @Test func interpolation_bindsValues_neverPastesThem() {
        let name = "x'); DROP TABLE t; --"
        let query: PostgresQuery = "SELECT id FROM t WHERE name = \(name) AND n > \(3) AND ids = ANY(\([1, 2]))"
        #expect(query.sql == "SELECT id FROM t WHERE name = $1 AND n > $2 AND ids = ANY($3)")
        #expect(query.binds == [.text(name), .int(3), .intArray([1, 2])])
        #expect(query.description == query.sql)
    }

    /// `query("… \(value)")` has only the `PostgresQuery` overload to pick: through the client, a connection and a
    /// pipeline alike, a value that reads as SQL is bound and comes back as data; the table it names is still there.
    @Test func queryCalls_bindInterpolatedValues_soSQLInAValueRoundTripsAsData() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let hostile = "x'); DROP TABLE t; --"
            try await client.query("CREATE TABLE t (via text, name text)")
            try await client.query("INSERT INTO t VALUES ('client', \(hostile))")
            _ = try await client.withConnection { connection in try connection.query("INSERT INTO t VALUES ('connection', \(hostile))") }
            try await client.pipelinedTransaction(["INSERT INTO t VALUES ('pipeline', \(hostile))"])
            let rows = try await client.query("SELECT via, name FROM t WHERE name = \(hostile) ORDER BY via")
            #expect(try rows.map { try $0["via"].string() } == ["client", "connection", "pipeline"])
            #expect(try rows.allSatisfy { try $0["name"].string() == hostile })
        }
    }

    /// `unescaped` pastes program-built SQL text (a quoted identifier); a script runs several statements and refuses a
    /// value, since the simple query protocol has no parameters.
    @Test func unescapedText_isPasted_andScriptsRefuseValues() async throws {
        let table = PostgresConnection.quoteIdentifier(#"odd "name""#)
        let query: PostgresQuery = "SELECT count(*) AS n FROM \(unescaped: table) WHERE v = \(1)"
        #expect(query.sql == #"SELECT count(*) AS n FROM "odd ""name""" WHERE v = $1"#)
        try await TestDatabase.withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try connection.executeScript("CREATE TABLE \(unescaped: table) (v int); INSERT INTO \(unescaped: table) VALUES (1), (2)")
            #expect(try connection.query(query)[0]["n"].int() == 1)
            let error = #expect(throws: PostgresError.self) { try connection.executeScript("DELETE FROM \(unescaped: table) WHERE v = \(1)") }
            #expect(error?.message.contains("cannot bind") == true)
            #expect(try connection.query("SELECT count(*) AS n FROM \(unescaped: table)")[0]["n"].int() == 2)
        }
    }

    @Test func fragments_composeAsSQL_withTheirParametersRenumbered() {
        let eligible: PostgresQuery = "(status = \("ACTIVE") OR \"revokedAt\" > \(Date(timeIntervalSince1970: 0)))"
        let query: PostgresQuery = "SELECT id FROM e WHERE environment = \("Sandbox") AND \(sql: eligible) LIMIT \(5)"
        #expect(query.sql == #"SELECT id FROM e WHERE environment = $1 AND (status = $2 OR "revokedAt" > $3) LIMIT $4"#)
        #expect(query.binds.count == 4)
        let plain: PostgresQuery = "status = 'ACTIVE'"
        let withPlain: PostgresQuery = "SELECT \(1), $$not a parameter$$ WHERE \(sql: plain)"
        #expect(withPlain.sql == "SELECT $1, $$not a parameter$$ WHERE status = 'ACTIVE'")
    }

    @Test func rows_decodeIntoATupleOfTypes() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let label = "p1"
            let rows = try await client.query("SELECT 42::bigint AS n, \(label)::text AS s, NULL::text AS o, now() AS t, true AS b")
            let (n, s, o, t, b) = try rows.first!.decode((Int, String, String?, Date, Bool).self)
            #expect(n == 42 && s == "p1" && o == nil && b)
            #expect(abs(t.timeIntervalSinceNow) < 60)
            #expect(throws: PostgresError.self) { try rows.first!.decode((Int, Int).self) }
        }
    }

    @Test func placeholders_rewriteEachBind_forAnotherTool() {
        let seconds = 60.0
        let query: PostgresQuery = "SELECT \(7), $$x$$, \(seconds)::double precision, \(seconds)::double precision"
        let text = query.sql { number, value in value == .int(7) ? ":limit" : ":lease\(number)" }
        #expect(text == "SELECT :limit, $$x$$, :lease2::double precision, :lease3::double precision")
    }

    @Test func columns_resolvedOnce_readEveryRowByName() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let rows = try await client.query("SELECT n, 'k' || n AS key FROM generate_series(1, 3) AS n")
            let key = rows.column("key"), n = rows.column("n")
            #expect(try rows.map { try $0[key].string() } == ["k1", "k2", "k3"])
            #expect(try rows.map { try $0[n].int() } == [1, 2, 3])
            #expect(rows.first![key].column == "key")
        }
    }
}
