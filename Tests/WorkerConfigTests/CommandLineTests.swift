import Foundation
import Testing
import TestSupport

/// The real binary: exit statuses and the one-line messages operators see.
@Suite("Command line", .blockingFixtures)
struct CommandLineTests {
    @Test(arguments: [
        ([:] as [String: String], "DATABASE_URL"),
        (["FCM_SERVICE_ACCOUNT_FILE": "/nonexistent/sa.json"], "FCM_SERVICE_ACCOUNT_FILE"),
        (["HEALTH_ADDR": "not-an-address"], "HEALTH_ADDR"),
        (["BATCH_SIZE": "abc"], "BATCH_SIZE"),
        (["LEASE_SECONDS": "-1"], "LEASE_SECONDS"),
    ])
    func badConfiguration_exits78NamingTheVariable(overrides: [String: String], variable: String) async throws {
        // A valid service account: check-config reads it as `run` does, so only the override is wrong.
        let fixtures = TLSFixtures.shared
        let account = try fixtures.serviceAccountFile(privateKeyPEM: try fixtures.rsaKeyPair().privatePEM, tokenURI: "https://127.0.0.1:1/token")
        var environment = ["DATABASE_URL": "host=/nonexistent dbname=x", "FCM_SERVICE_ACCOUNT_FILE": account]
        if overrides.isEmpty { environment["DATABASE_URL"] = nil }
        environment.merge(overrides) { $1 }
        let result = try await TestBinaries.run("medication-worker", ["check-config"], environment: environment)
        #expect(result.status == 78)
        #expect(result.stderr.contains(variable))
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(result.stdout.isEmpty)
    }

    @Test func versionAndHelp_exitZero() async throws {
        let version = try await TestBinaries.run("medication-worker", ["--version"], environment: [:])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("medication-worker "))
        let help = try await TestBinaries.run("medication-worker", ["--help"], environment: [:])
        #expect(help.status == 0)
        #expect(help.stdout.contains("redrive"))
    }

    /// Issue 45: a duration that overflows (days to seconds used to trap on Int64 overflow) is a configuration error
    /// naming the setting for the daemon, and a usage error naming the option for a command.
    @Test func overflowingDuration_isAConfigurationErrorForRun_andAUsageErrorForSince() async throws {
        let fixtures = TLSFixtures.shared
        let account = try fixtures.serviceAccountFile(privateKeyPEM: try fixtures.rsaKeyPair().privatePEM, tokenURI: "https://127.0.0.1:1/token")
        let run = try await TestBinaries.run("medication-worker", ["run"], environment: [
            "DATABASE_URL": "host=/nonexistent dbname=x", "FCM_SERVICE_ACCOUNT_FILE": account, "EVENT_MAX_AGE": "999999999999999d",
        ])
        #expect(run.status == 78)
        #expect(run.stderr.contains(#"EVENT_MAX_AGE: must be at most 36500d (100 years), got "999999999999999d""#), "\(run.stderr)")
        for command in [["events", "--status", "DEAD"], ["redrive"], ["devices", "disabled"]] {
            let result = try await TestBinaries.run("medication-worker", command + ["--since", "999999999999999d"], environment: [:])
            #expect(result.status == 64, "\(command): \(result.stderr)")
            #expect(result.stderr.contains(#"--since must be at most 36500d (100 years), got "999999999999999d""#), "\(command): \(result.stderr)")
        }
    }

    /// Issue 45: a bare `redrive` would re-queue every DEAD event; it asks for a scope instead.
    @Test func bareRedrive_isAUsageErrorAskingForAScope() async throws {
        let result = try await TestBinaries.run("medication-worker", ["redrive"], environment: [:])
        #expect(result.status == 64)
        #expect(result.stderr.contains("redrive needs --all, --event ID or --since DURATION"), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test func unknownCommand_isAUsageError() async throws {
        let result = try await TestBinaries.run("medication-worker", ["frobnicate"], environment: [:])
        #expect(result.status == 64)
        #expect(result.stderr.contains("frobnicate"))
    }
}
