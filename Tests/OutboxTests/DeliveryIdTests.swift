import Foundation
@testable import Outbox
import Postgres
import Testing
import TestSupport

@Suite("Delivery ids", .blockingFixtures)
struct DeliveryIdTests {
    /// The fan-out's ids are UUIDs version 7: valid `uuid` text, version nibble 7, RFC 9562's variant, the current
    /// Unix milliseconds in front, so that they sort by creation time (the primary key grows at its right edge).
    @Test func deliveryIds_areTimeOrderedUUIDv7() async throws {
        try await TestDatabase.withEmptyDatabase { conninfo in
            let client = PostgresClient(conninfo: conninfo)
            let before = Int64(Date().timeIntervalSince1970 * 1000)
            let rows = try await client.query("SELECT \(sql: DeliveryFanOut.deliveryIdSQL) AS id FROM generate_series(1, 500)")
            let after = Int64(Date().timeIntervalSince1970 * 1000)
            let ids = try rows.map { try $0["id"].string() }
            #expect(Set(ids).count == 500)
            for id in ids {
                let hex = Array(id.replacingOccurrences(of: "-", with: ""))
                #expect(id.count == 36 && hex.count == 32)
                #expect(hex[12] == "7")
                #expect("89ab".contains(hex[16]))
                let millis = Int64(String(hex[0..<12]), radix: 16) ?? 0
                #expect(millis >= before - 5 && millis <= after + 5)
            }
            // Valid `uuid` text whichever way the API reads it back.
            let parsed = try await client.query("SELECT count(*) AS n FROM unnest(\(ids)::text[]) AS t(id) WHERE id::uuid::text = id")
            #expect(try parsed[0]["n"].int() == 500)
            // Later ids sort after earlier ones (to the millisecond).
            let later = try await client.query("SELECT \(sql: DeliveryFanOut.deliveryIdSQL) AS id FROM pg_sleep(0.01)")
            #expect(try later[0]["id"].string() > ids.max()!)
        }
    }
}
