import Foundation
import Postgres
import Testing
import TestSupport
import WorkerConfig

/// The real `medication-worker run` binary with App Store settings: the loop is wired, SIGTERM mid-pass exits in time,
/// and the settings of SPEC §4 are read and bounded.
@Suite("App Store loop in the daemon", .serialized, .blockingFixtures)
struct AppStoreDaemonTests {
    /// The App Store part of a valid environment (key, root, fakes' URLs).
    static func appStoreEnvironment(production: FakeAppStore, sandbox: FakeAppStore) throws -> [String: String] {
        let pki = ApplePKI.shared
        return [
            "APPSTORE_ISSUER_ID": "issuer-1", "APPSTORE_KEY_ID": "KEY123", "APPSTORE_BUNDLE_ID": EntitlementRecheckerTests.bundle,
            "APPSTORE_PRIVATE_KEY_FILE": try TestBinaries.temporaryFile(pki.apiKeyPEM, suffix: ".p8"),
            "APPSTORE_ROOT_CERT_FILES": try TestBinaries.temporaryFile(pki.rootPEM, suffix: ".pem"),
            "APPSTORE_PRODUCTION_URL": production.baseURL, "APPSTORE_SANDBOX_URL": sandbox.baseURL,
        ]
    }

    @Test func sigtermMidPass_exitsWithinShutdownTimeout_andGivesRowsBack() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let pki = ApplePKI.shared
            let production = try FakeAppStore(apiPublicKeyPEM: pki.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1",
                                              bundleId: EntitlementRecheckerTests.bundle)
            let sandbox = try FakeAppStore(apiPublicKeyPEM: pki.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1",
                                           bundleId: EntitlementRecheckerTests.bundle)
            defer { production.stop(); sandbox.stop() }
            let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
            // A pass of 40 rows at 1 request/s: ~40 s of work; the first lookup is held by Apple.
            try await EntitlementRecheckerTests.insert(db, id: "a-stall", transaction: "6100000000")
            production.answer("6100000000", .stall)
            for n in 1...39 { try await EntitlementRecheckerTests.insert(db, id: "b-\(n)", transaction: "62\(String(format: "%08d", n))") }

            let fixtures = TLSFixtures.shared
            let account = try fixtures.serviceAccountFile(privateKeyPEM: try fixtures.rsaKeyPair().privatePEM, tokenURI: "https://127.0.0.1:9/token")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: TestBinaries.path("medication-worker"))
            process.arguments = ["run"]
            process.environment = [
                "DATABASE_URL": conninfo, "FCM_SERVICE_ACCOUNT_FILE": account, "TLS_CA_FILE": fixtures.caFile, "HEALTH_ADDR": "127.0.0.1:0",
                "SHUTDOWN_TIMEOUT": "5s", "APPSTORE_REQUESTS_PER_SECOND": "1", "APPSTORE_NOTIFICATION_HISTORY": "on",
                "APPSTORE_NOTIFICATION_POLL_INTERVAL": "1h",
            ].merging(try Self.appStoreEnvironment(production: production, sandbox: sandbox)) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            let exit = try process.start()
            defer { if !exit.hasExited { process.terminate(); _ = exit.waitBlocking() } }
            try await eventually("Apple holds a lookup after at least two requests", timeout: .seconds(20), every: .milliseconds(10)) {
                production.stalledNow > 0 && production.requests.count >= 2
            }
            #expect(production.stalledNow == 1 && production.requests.count >= 2)  // mid-pass, a lookup in flight

            let clock = ContinuousClock()
            let signalled = clock.now
            process.terminate()  // SIGTERM
            let status = await exit.wait()
            let took = clock.now - signalled
            #expect(took < .seconds(5) + .milliseconds(900), "SIGTERM to exit took \(took) (SHUTDOWN_TIMEOUT 5s)")
            #expect(status == 0)
            #expect(production.stalledNow == 1)  // it did not wait for Apple's answer
            // Rows not answered are due again at once for the next start (nothing leased ahead, no failure charged).
            let leftLeased = try await db.query(#"""
                SELECT count(*) AS n FROM "CaregiverEntitlement" WHERE "checkFailures" = 0 AND "nextCheckAt" > now()
                """#)[0]["n"].int()
            #expect(leftLeased == 0)
        }
    }

    @Test func settings_defaultsAndBounds() throws {
        let production = try FakeAppStore(apiPublicKeyPEM: ApplePKI.shared.apiPublicKeyPEM, keyId: "K", issuerId: "i", bundleId: "b")
        defer { production.stop() }
        var environment = try Self.appStoreEnvironment(production: production, sandbox: production)
        environment["DATABASE_URL"] = "host=/tmp dbname=x"
        environment["FCM_SERVICE_ACCOUNT_FILE"] = try TestBinaries.temporaryFile("{}", suffix: ".json")
        let defaults = try #require(try Configuration.load(from: environment).appStore)
        #expect(defaults.requestsPerSecond == 20 && !defaults.notificationHistory && defaults.notificationPollInterval == .seconds(300))
        var custom = environment
        custom["APPSTORE_REQUESTS_PER_SECOND"] = "50"
        custom["APPSTORE_NOTIFICATION_HISTORY"] = "on"
        custom["APPSTORE_NOTIFICATION_POLL_INTERVAL"] = "2s"
        let configuration = try Configuration.load(from: custom)
        let set = try #require(configuration.appStore)
        #expect(set.requestsPerSecond == 50 && set.notificationHistory && set.notificationPollInterval == .seconds(2))
        #expect(configuration.redactedDescription.contains("APPSTORE_REQUESTS_PER_SECOND=50"))
        #expect(configuration.redactedDescription.contains("APPSTORE_NOTIFICATION_HISTORY=on"))
        #expect(configuration.redactedDescription.contains("APPSTORE_NOTIFICATION_POLL_INTERVAL=2s"))
        for (name, value) in [("APPSTORE_REQUESTS_PER_SECOND", "51"), ("APPSTORE_REQUESTS_PER_SECOND", "0"),
                              ("APPSTORE_NOTIFICATION_HISTORY", "maybe"), ("APPSTORE_NOTIFICATION_POLL_INTERVAL", "soon")] {
            var bad = environment
            bad[name] = value
            #expect(throws: ConfigurationErrors.self) { try Configuration.load(from: bad) }
            do { _ = try Configuration.load(from: bad) } catch { #expect(error.errors.map(\.variable) == [name]) }
        }
    }
}
