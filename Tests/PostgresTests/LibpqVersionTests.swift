import CLibPQ
import Foundation
@testable import Postgres
import Testing
import TestSupport

/// Which libpq this test process loaded and which server it talked to: the line `libraries: libpq …` in the
/// output (scripts/test-trixie runs the suites inside a Debian 13 container, against its PostgreSQL 17).
/// MW_EXPECT_PG_MAJOR=17 makes both a check.
@Suite("libpq and the server at run time")
struct LibpqVersionTests {
    @Test("PQlibVersion and the server's version")
    func versions() async throws {
        let lib = Int(PQlibVersion())
        let server = try await TestDatabase.withEmptyDatabase { conninfo in
            let rows = try await PostgresClient(conninfo: conninfo).query("SELECT current_setting('server_version_num')::int AS v", [])
            return try #require(rows.first)["v"].int()
        }
        print("libraries: libpq \(lib / 10000).\(lib % 10000), server \(server / 10000).\(server % 10000)")
        if let expected = ProcessInfo.processInfo.environment["MW_EXPECT_PG_MAJOR"].flatMap(Int.init) {
            #expect(lib / 10000 == expected, "libpq \(lib)")
            #expect(server / 10000 == expected, "server \(server)")
        }
    }
}
