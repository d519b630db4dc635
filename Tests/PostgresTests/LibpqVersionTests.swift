import Foundation
@testable import Postgres
import Testing
import TestSupport

/// Which libpq this test process loaded and which server it talked to: the line `libraries: libpq …` in the
/// output (scripts/test-trixie runs the suites inside a Debian 13 container, against its PostgreSQL 17).
/// The library is read from /proc/self/maps (Debian's libpq.so.5.<major>), as only the Postgres module may
/// import CLibPQ (ModuleFloorsTests). MW_EXPECT_PG_MAJOR=17 makes both a check.
@Suite("libpq and the server at run time")
struct LibpqVersionTests {
    @Test("the loaded libpq and the server's version")
    func versions() async throws {
        let server = try await TestDatabase.withEmptyDatabase { conninfo in
            let rows = try await PostgresClient(conninfo: conninfo).query("SELECT current_setting('server_version_num')::int AS v")
            return try #require(rows.first)["v"].int()
        }
        // Read to EOF: /proc files report a size of 0.
        let maps = String(decoding: try #require(FileHandle(forReadingAtPath: "/proc/self/maps")).readDataToEndOfFile(), as: UTF8.self)
        let path = try #require(maps.split(separator: "\n").compactMap { $0.split(separator: " ").last }
            .first { $0.contains("/libpq.so.5") }.map(String.init), "libpq not loaded")
        let resolved = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? path
        let major = resolved.split(separator: "/").last?.split(separator: ".").last.flatMap { Int($0) }
        print("libraries: libpq \(resolved) (major \(major.map(String.init) ?? "?")), server \(server / 10000).\(server % 10000)")
        if let expected = ProcessInfo.processInfo.environment["MW_EXPECT_PG_MAJOR"].flatMap(Int.init) {
            #expect(major == expected, "libpq \(resolved)")
            #expect(server / 10000 == expected, "server \(server)")
        }
    }
}
