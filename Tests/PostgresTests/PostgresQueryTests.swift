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
            let rows = try await client.query("SELECT 42::bigint AS n, \(label)::text AS s, NULL::text AS o, now() AS t, true AS b" as PostgresQuery)
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
