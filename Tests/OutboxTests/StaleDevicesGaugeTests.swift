import Metrics
import Outbox
import Postgres
import Testing
import TestSupport

/// `push_devices_stale{days}`: enabled registrations not seen for 60 and 270 days, fleet-wide, counted by the `status`
/// holder under the least-privilege role and exported by every instance. Counting changes nothing: a stale device is
/// still a recipient.
@Suite("Stale registrations gauge", .blockingFixtures)
struct StaleDevicesGaugeTests {
    static let settings = TransactionSettings.worker(statementTimeout: .seconds(30), lockTimeout: .seconds(5), asynchronousCommit: true)

    @Test func staleGauge_countsEnabledDevicesNotSeenFor60And270Days_onEveryInstance() async throws {
        try await TestDatabase.withMigratedDatabase { owner in
            let admin = try PostgresConnection(conninfo: owner)
            try admin.query(#"""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, "isEnabled", "lastSeenAt") VALUES
                    ('fresh', \#(literal: OwnerType.caregiver), 'c1', 'token-fresh', true, now() - interval '10 days'),
                    ('two-months', \#(literal: OwnerType.caregiver), 'c1', 'token-61', true, now() - interval '61 days'),
                    ('ten-months', \#(literal: OwnerType.caregiver), 'c2', 'token-300', true, now() - interval '300 days'),
                    ('off', \#(literal: OwnerType.caregiver), 'c3', 'token-off', false, now() - interval '400 days')
                """#)
            try await LeastPrivilegeRole.with(owner: owner) { worker in
                let (metricsA, metricsB) = (MetricsRegistry(), MetricsRegistry())
                let gaugesA = QueueGauges(client: PostgresClient(conninfo: worker, maxConnections: 1, settings: Self.settings), metrics: metricsA)
                let gaugesB = QueueGauges(client: PostgresClient(conninfo: worker, maxConnections: 1, settings: Self.settings), metrics: metricsB)
                try await gaugesA.refresh()
                try await gaugesB.refresh()  // not the holder: exports what A published
                for metrics in [metricsA, metricsB] {
                    #expect(metrics.value("push_devices_stale", labels: ["days": "60"]) == 2)
                    #expect(metrics.value("push_devices_stale", labels: ["days": "270"]) == 1)
                }
                let exposition = metricsB.render()
                #expect(exposition.contains(#"push_devices_stale{days="60"} 2"#), "\(exposition)")
                await gaugesA.release()
            }
            // Nothing was disabled: a caregiver who rarely opens the app still gets the push.
            #expect(try admin.query(#"SELECT count(*) AS n FROM "PushDevice" WHERE "isEnabled""#)[0]["n"].int() == 3)
        }
    }
}
