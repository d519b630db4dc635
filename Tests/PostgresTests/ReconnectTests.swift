import Foundation
import Postgres
import Testing
import TestSupport

@Suite("Postgres reconnect", .blockingFixtures)
struct ReconnectTests {
    /// A dropped backend (what a server restart or failover does to every session) fails the call in flight
    /// with a connection error; the next call reconnects and succeeds.
    @Test func queryAfterBackendTerminated_reconnects() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo, maxConnections: 1)
            let pid = try await client.query("SELECT pg_backend_pid() AS pid")[0]["pid"].int()
            let admin = try PostgresConnection(conninfo: conninfo)
            try admin.query("SELECT pg_terminate_backend(\(pid))")
            let error = await #expect(throws: PostgresError.self) {
                try await client.query("SELECT 1")
            }
            #expect(error?.isConnectionError == true)
            let newPid = try await client.query("SELECT pg_backend_pid() AS pid")[0]["pid"].int()
            #expect(newPid != pid)
        }
    }
}
