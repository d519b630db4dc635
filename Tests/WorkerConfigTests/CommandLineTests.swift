import Foundation
import Testing
import TestSupport

/// The real binary: exit statuses and the one-line messages operators see.
@Suite("Command line")
struct CommandLineTests {
    @Test(arguments: [
        ([:] as [String: String], "DATABASE_URL"),
        (["FCM_SERVICE_ACCOUNT_FILE": "/nonexistent/sa.json"], "FCM_SERVICE_ACCOUNT_FILE"),
        (["HEALTH_ADDR": "not-an-address"], "HEALTH_ADDR"),
        (["BATCH_SIZE": "abc"], "BATCH_SIZE"),
        (["LEASE_SECONDS": "-1"], "LEASE_SECONDS"),
    ])
    func badConfiguration_exits78NamingTheVariable(overrides: [String: String], variable: String) throws {
        // A valid service account: check-config reads it as `run` does, so only the override is wrong.
        let fixtures = TLSFixtures.shared
        let account = try fixtures.serviceAccountFile(privateKeyPEM: try fixtures.rsaKeyPair().privatePEM, tokenURI: "https://127.0.0.1:1/token")
        var environment = ["DATABASE_URL": "host=/nonexistent dbname=x", "FCM_SERVICE_ACCOUNT_FILE": account]
        if overrides.isEmpty { environment["DATABASE_URL"] = nil }
        environment.merge(overrides) { $1 }
        let result = try TestBinaries.run("medication-worker", ["check-config"], environment: environment)
        #expect(result.status == 78)
        #expect(result.stderr.contains(variable))
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(result.stdout.isEmpty)
    }

    @Test func versionAndHelp_exitZero() throws {
        let version = try TestBinaries.run("medication-worker", ["--version"], environment: [:])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("medication-worker "))
        let help = try TestBinaries.run("medication-worker", ["--help"], environment: [:])
        #expect(help.status == 0)
        #expect(help.stdout.contains("redrive"))
    }

    @Test func unknownCommand_isAUsageError() throws {
        let result = try TestBinaries.run("medication-worker", ["frobnicate"], environment: [:])
        #expect(result.status == 64)
        #expect(result.stderr.contains("frobnicate"))
    }
}
