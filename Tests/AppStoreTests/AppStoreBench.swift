import AppStore
import Foundation
import HTTP
import Logging
import Metrics
import Postgres
import Testing
import TestSupport

/// Figures for the note (scripts/bench-appstore runs this in a release build; off in the normal suite):
/// one full sweep of APPSTORE_BENCH_ROWS entitlements against nginx serving Apple-signed transactions over HTTP/2 + TLS at
/// a high configured rate (wall time, the worker's CPU per lookup: this process holds only the worker, nginx and
/// PostgreSQL are other processes), then the delay from the fake recording a REFUND to the row being REVOKED (2 s poll).
@Suite("App Store benchmark", .serialized, .enabled(if: ProcessInfo.processInfo.environment["APPSTORE_BENCH_ROWS"] != nil))
struct AppStoreBench {
    static var rows: Int { Int(ProcessInfo.processInfo.environment["APPSTORE_BENCH_ROWS"] ?? "") ?? 100_000 }
    static var rate: Double { Double(ProcessInfo.processInfo.environment["APPSTORE_BENCH_RATE"] ?? "") ?? 20_000 }

    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    @Test func fullSweep_timeAndCPUPerLookup() async throws {
        guard let nginx = Nginx.binary else { throw TestSupportError("nginx is not installed") }
        try await TestDatabase.withMigratedDatabase { conninfo in
            let count = Self.rows
            let pki = ApplePKI.shared
            let directory = NSTemporaryDirectory() + "mw-appstore-bench-\(UUID().uuidString.prefix(8))"
            let files = directory + "/root/inApps/v1/transactions"
            try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: directory + "/logs", withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // Every transaction signed once, served as a static file (1 in 100 refunded).
            let started = ContinuousClock.now
            for n in 0..<count {
                let id = String(900_000_000_000 + n)
                let revoked = n % 100 == 0 ? Int64(1_770_000_000_000) : nil
                let jws = try pki.signedTransaction(ApplePKI.payload(transactionId: id, original: id, revocationDate: revoked,
                                                                     revocationReason: revoked == nil ? nil : 0))
                try Data(#"{"signedTransactionInfo":"\#(jws)"}"#.utf8).write(to: URL(fileURLWithPath: "\(files)/\(id)"))
            }
            let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
            try await db.query(#"""
                INSERT INTO "CaregiverEntitlement" (id, "caregiverId", "productId", "originalTransactionId", "transactionId", environment, status, "purchasedAt")
                SELECT 'e-' || n, 'c-' || n, 'premium.monthly', (900000000000 + n)::text, (900000000000 + n)::text, 'Production', \#(literal: EntitlementStatus.active), now()
                FROM generate_series(0, \#(count)::int - 1) AS n
                """#)
            try await db.query(#"ANALYZE "CaregiverEntitlement""#)
            print("bench: prepared \(count) signed transactions and rows in \(ContinuousClock.now - started)")

            let fixtures = TLSFixtures.shared
            let port = FreePort.next()
            try fixtures.serverCertificatePEM.write(toFile: "\(directory)/server.pem", atomically: true, encoding: .utf8)
            try fixtures.serverKeyPEM.write(toFile: "\(directory)/server.key", atomically: true, encoding: .utf8)
            try """
                worker_processes 1;
                pid \(directory)/nginx.pid;
                error_log \(directory)/logs/error.log warn;
                events { worker_connections 4096; }
                http {
                    access_log off;
                    client_body_temp_path \(directory)/body;
                    keepalive_requests 10000000;
                    http2_max_concurrent_streams 256;
                    server {
                        listen 127.0.0.1:\(port) ssl http2;
                        ssl_certificate \(directory)/server.pem;
                        ssl_certificate_key \(directory)/server.key;
                        location /inApps/v1/transactions/ { root \(directory)/root; default_type application/json; }
                    }
                }
                """.write(toFile: "\(directory)/nginx.conf", atomically: true, encoding: .utf8)
            let server = Process()
            server.executableURL = URL(fileURLWithPath: nginx)
            server.arguments = ["-p", directory, "-c", "\(directory)/nginx.conf", "-g", "daemon off;"]
            try server.run()
            defer { server.terminate() }
            try await Task.sleep(for: .milliseconds(500))

            var configuration = AppStoreConfiguration(
                issuerId: "issuer-1", keyId: "KEY123", bundleId: EntitlementRecheckerTests.bundle, privateKey: try .init(pem: pki.apiKeyPEM),
                roots: [try .init(pemOrDER: Array(pki.rootPEM.utf8))], productionURL: "https://127.0.0.1:\(port)",
                sandboxURL: "https://127.0.0.1:\(port)", http: HTTPClientConfiguration(maxInFlight: 8, caFile: fixtures.caFile))
            configuration.productionRate = Self.rate
            let metrics = MetricsRegistry()
            let rechecker = try EntitlementRechecker(configuration: configuration, conninfo: conninfo,
                                                     logger: Logger(label: "bench", logLevel: .error, sink: MemorySink()), metrics: metrics)
            defer { rechecker.shutdown() }
            let cpuBefore = Self.cpuSeconds()
            let clockBefore = ContinuousClock.now
            let summary = try await rechecker.runOnce()
            let wall = ContinuousClock.now - clockBefore
            let cpu = Self.cpuSeconds() - cpuBefore
            #expect(summary.checked == count && summary.failed == 0 && summary.revoked == (count + 99) / 100)
            let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
            print(String(format: "bench: full sweep of %d entitlements at a configured %.0f/s: %.1f s wall (%.0f lookups/s), worker CPU %.1f s = %.0f µs per lookup; revoked %d",
                         count, Self.rate, seconds, Double(count) / seconds, cpu, cpu / Double(count) * 1e6, summary.revoked))
        }
    }

    @Test func refundDelay_withATwoSecondPoll() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try EntitlementRecheckerTests.rig(conninfo) { configuration in
                configuration.notificationHistory = true
                configuration.notificationPollInterval = .seconds(2)
            }
            defer { rig.stop() }
            let pki = ApplePKI.shared
            let samples = 10
            for n in 0..<samples { try await EntitlementRecheckerTests.insert(rig.db, id: "d-\(n)", transaction: "95000000\(String(format: "%02d", n))") }
            try await rig.db.query(#"UPDATE "CaregiverEntitlement" SET "nextCheckAt" = now() + interval '5 hours', "lastCheckedAt" = now()"#)
            let loop = Task { await rig.rechecker.run() }
            var delays: [Double] = []
            for n in 0..<samples {
                // Spread the refunds over the poll cycle.
                try await Task.sleep(for: .milliseconds(Int64.random(in: 300...2300)))
                let id = "95000000\(String(format: "%02d", n))"
                let recorded = ContinuousClock.now
                rig.production.record("REFUND", signedPayload: try NotificationHistoryTests.refund(pki, id))
                while try await EntitlementRecheckerTests.row(rig.db, "d-\(n)").status == .active { try await Task.sleep(for: .milliseconds(5)) }
                let delay = ContinuousClock.now - recorded
                delays.append(Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
            }
            loop.cancel()
            await loop.value
            let sorted = delays.sorted()
            print(String(format: "bench: REFUND recorded → row REVOKED with a 2 s poll, %d samples: min %.2f s, median %.2f s, max %.2f s",
                         samples, sorted[0], sorted[samples / 2], sorted[samples - 1]))
        }
    }
}
