import Foundation
import Testing
import TestSupport
import WorkerConfig

@Suite("Configuration")
struct ConfigurationTests {
    /// A minimal valid environment (the service account file only has to be readable here).
    static func baseEnvironment() throws -> [String: String] {
        let file = try TestBinaries.temporaryFile("{}", suffix: ".json")
        return ["DATABASE_URL": "host=/tmp dbname=x", "FCM_SERVICE_ACCOUNT_FILE": file]
    }

    /// MAX_IN_FLIGHT holds sends until their outcome is written; half of it, rounded up, goes on the wire.
    @Test(arguments: [(1, 1), (5, 3), (20, 10), (301, 151)])
    func maxSending_isHalfOfMaxInFlight_roundedUp(maxInFlight: Int, onTheWire: Int) throws {
        var environment = try Self.baseEnvironment()
        environment["MAX_IN_FLIGHT"] = String(maxInFlight)
        let configuration = try Configuration.load(from: environment)
        #expect(configuration.maxInFlight == maxInFlight)
        #expect(configuration.maxSending == onTheWire)
    }

    @Test func defaults_matchTheSpec() throws {
        let configuration = try Configuration.load(from: Self.baseEnvironment())
        #expect(configuration.fcmBaseURL == "https://fcm.googleapis.com")
        #expect(configuration.healthHost == "127.0.0.1" && configuration.healthPort == 9464)
        #expect(configuration.batchSize == 100)
        #expect(configuration.maxInFlight == 1200)
        #expect(configuration.maxSending == 600)
        #expect(configuration.pollInterval == .milliseconds(1000))
        #expect(configuration.leaseDuration == .seconds(60))
        #expect(configuration.maxAttempts == 10)
        #expect(configuration.eventMaxAge == .seconds(86_400))
        #expect(configuration.entitlementRecheckInterval == .seconds(6 * 3600))
        #expect(configuration.outboxRetention == .seconds(7 * 86_400))
        #expect(configuration.deliveryRetention == .seconds(30 * 86_400))
        #expect(configuration.shutdownTimeout == .seconds(10))
        #expect(configuration.logLevel == .info)
        #expect(configuration.appStore == nil)
        #expect(configuration.fcmMaxSendsPerSecond == nil)
    }

    @Test func fcmBudget_isReadAndShown() throws {
        var environment = try Self.baseEnvironment()
        environment["FCM_MAX_SENDS_PER_SECOND"] = "9500"
        let configuration = try Configuration.load(from: environment)
        #expect(configuration.fcmMaxSendsPerSecond == 9500)
        #expect(configuration.redactedDescription.contains("FCM_MAX_SENDS_PER_SECOND=9500"))
    }

    @Test(arguments: [
        ("DATABASE_URL", nil as String?),
        ("FCM_SERVICE_ACCOUNT_FILE", "/nonexistent/fcm.json"),
        ("HEALTH_ADDR", "localhost"),
        ("HEALTH_ADDR", "127.0.0.1:99999"),
        ("BATCH_SIZE", "ten"),
        ("LEASE_SECONDS", "-5"),
        ("MAX_IN_FLIGHT", "0"),
        ("EVENT_MAX_AGE", "1 week"),
        ("LOG_LEVEL", "verbose"),
        ("FCM_BASE_URL", "fcm.googleapis.com"),
        ("FCM_BASE_URL", "http://fcm.googleapis.com"),
        ("FCM_BASE_URL", "https://fcm.googleapis.com/v1/projects"),
        ("FCM_BASE_URL", "https://fcm.googleapis.com?x=1"),
        ("FCM_BASE_URL", "https://user:pw@fcm.googleapis.com"),
        ("TLS_CA_FILE", "/nonexistent/ca.pem"),
        ("FCM_MAX_SENDS_PER_SECOND", "0"),
        ("FCM_MAX_SENDS_PER_SECOND", "lots"),
        ("FCM_MAX_SENDS_PER_SECOND", "1000001"),
        ("APPSTORE_ISSUER_ID", "only-this-one"),
    ])
    func badSetting_namesTheVariable(variable: String, value: String?) throws {
        var environment = try Self.baseEnvironment()
        environment[variable] = value
        let error = #expect(throws: ConfigurationErrors.self) { try Configuration.load(from: environment) }
        let named = error?.errors.map(\.variable) ?? []
        if variable == "APPSTORE_ISSUER_ID" {
            // The rest of the group is missing: each member is named.
            #expect(!named.isEmpty && named.allSatisfy { $0.hasPrefix("APPSTORE_") })
        } else {
            #expect(named == [variable])
        }
    }

    /// Issue 54: values that passed the start and failed later (or for ever): an optional setting of a feature that is
    /// off, a connection string libpq cannot parse, a statement timeout over PostgreSQL's maximum, a shutdown timeout
    /// the unit would cut short. Each is named, and no secret of the value is echoed.
    @Test(arguments: [
        ("APPSTORE_NOTIFICATION_HISTORY", "maybe", "must be on or off"),
        ("APPSTORE_NOTIFICATION_POLL_INTERVAL", "soon", "positive duration"),
        ("APPSTORE_REQUESTS_PER_SECOND", "500", "must be in 1...50"),
        ("APPSTORE_SANDBOX_URL", "http://sandbox", "https URL"),
        ("DATABASE_URL", "postgresql://worker:Zebra%zzS3cret@host/db", "libpq cannot parse it"),
        ("DATABASE_URL", "host=db password='Zebra S3cret user=w", "libpq cannot parse it"),
        ("DATABASE_LISTEN_URL", "postgresql://worker:Zebra%zzS3cret@host/db", "libpq cannot parse it"),
        ("DATABASE_STATEMENT_TIMEOUT", "30d", "at most 2147483647ms"),
        ("DATABASE_STATEMENT_TIMEOUT", "2147483648ms", "at most 2147483647ms"),
        ("SHUTDOWN_TIMEOUT", "20s", "at most 15s"),
    ])
    func valuesThatFailedLater_areRefusedAtStart_namingTheSetting(variable: String, value: String, problem: String) throws {
        var environment = try Self.baseEnvironment()
        environment[variable] = value
        let error = #expect(throws: ConfigurationErrors.self) { try Configuration.load(from: environment) }
        #expect(error?.errors.map(\.variable) == [variable])
        #expect(error?.errors.first?.problem.contains(problem) == true, "\(error?.description ?? "")")
        #expect(error?.description.contains("S3cret") == false, "\(error?.description ?? "")")
        if variable == "DATABASE_URL" || variable == "DATABASE_STATEMENT_TIMEOUT" {  // the database commands read these too
            #expect(throws: ConfigurationErrors.self) { try Configuration.loadOperatorSettings(from: environment) }
        }
    }

    /// The largest values that are still accepted: PostgreSQL's own maximum, and the unit's stop timeout less 5 s.
    @Test func statementAndShutdownTimeouts_acceptTheirLimit() throws {
        var environment = try Self.baseEnvironment()
        environment["DATABASE_STATEMENT_TIMEOUT"] = "2147483647ms"
        environment["SHUTDOWN_TIMEOUT"] = "15s"
        let configuration = try Configuration.load(from: environment)
        #expect(configuration.databaseStatementTimeout == .milliseconds(2_147_483_647))
        #expect(configuration.shutdownTimeout == .seconds(15))
    }

    /// The shutdown cap is derived from the unit's `TimeoutStopSec=`: the two cannot drift apart unnoticed.
    @Test func shutdownCap_followsTheUnitsTimeoutStopSec() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let unit = try String(contentsOf: root.appendingPathComponent("systemd/medication-worker.service"), encoding: .utf8)
        let line = unit.split(separator: "\n").first { $0.hasPrefix("TimeoutStopSec=") }
        #expect(line == "TimeoutStopSec=\(ValueParsing.format(Configuration.Defaults.unitStopTimeout))")
        #expect(Configuration.Defaults.maxShutdownTimeout == Configuration.Defaults.unitStopTimeout - .seconds(5))
    }

    /// Issue 54: a URL-like setting's user info is hidden up to its last '@', with or without a scheme (libcurl takes
    /// `user:password@host:port` as a proxy).
    @Test(arguments: [
        ("HTTPS_PROXY", "alice:S3cretProxyPw@squid.internal:3128", "HTTPS_PROXY=alice:***@squid.internal:3128 (from HTTPS_PROXY)"),
        ("HTTPS_PROXY", "http://alice:p@ss@squid:3128", "HTTPS_PROXY=http://alice:***@squid:3128 (from HTTPS_PROXY)"),
        ("https_proxy", "S3cretToken@squid:3128", "HTTPS_PROXY=***@squid:3128 (from https_proxy)"),
        ("DATABASE_URL", "postgresql://worker:p@ss/S3cret@db.internal/app", "DATABASE_URL=postgresql://worker:***@db.internal/app"),
        ("DATABASE_LISTEN_URL", "host=db password=p@ssS3cret user=w", "DATABASE_LISTEN_URL=host=db password=*** user=w"),
    ])
    func urlLikeSettings_hideUserInfoUpToTheLastAt(variable: String, value: String, shown: String) throws {
        var environment = try Self.baseEnvironment()
        environment[variable] = value
        let text = try Configuration.load(from: environment).redactedDescription
        #expect(text.contains(shown), "\(text)")
        for secret in ["S3cret", "p@ss", "ss@"] { #expect(!text.contains(secret), "\(text)") }
    }

    @Test func severalBadSettings_areAllNamedInOnePass() throws {
        var environment = try Self.baseEnvironment()
        environment["DATABASE_URL"] = nil
        environment["BATCH_SIZE"] = "ten"
        environment["LOG_LEVEL"] = "verbose"
        environment["FCM_BASE_URL"] = "https://user:pw@fcm.googleapis.com"
        let error = #expect(throws: ConfigurationErrors.self) { try Configuration.load(from: environment) }
        #expect(Set(error?.errors.map(\.variable) ?? []) == ["DATABASE_URL", "BATCH_SIZE", "LOG_LEVEL", "FCM_BASE_URL"])
        // A URL's credentials are not echoed back.
        #expect(error?.description.contains("pw@") == false)
        #expect(error?.description.split(separator: "\n").count == 5)
    }

    /// Deliveries kept for less than EVENT_MAX_AGE could be deleted while their event may still be sent (an event not
    /// settled yet does not protect them), and each one deleted would be sent again: refused, naming both settings,
    /// whether DELIVERY_RETENTION was set short or EVENT_MAX_AGE raised past its default.
    @Test(arguments: [(retention: "1h", maxAge: nil, got: #"got "1h""#), (retention: nil, maxAge: "60d", got: "got the default 30d")] as [(String?, String?, String)])
    func deliveryRetentionShorterThanEventMaxAge_isRefused(retention: String?, maxAge: String?, got: String) throws {
        var environment = try Self.baseEnvironment()
        environment["DELIVERY_RETENTION"] = retention
        environment["EVENT_MAX_AGE"] = maxAge
        let error = #expect(throws: ConfigurationErrors.self) { try Configuration.load(from: environment) }
        #expect(error?.errors.map(\.variable) == ["DELIVERY_RETENTION"])
        let expected = "DELIVERY_RETENTION: must be at least EVENT_MAX_AGE (\(maxAge ?? "1d")): a delivery deleted while its event may still be sent "
            + "would be sent again, \(got)"
        #expect(error?.description.contains(expected) == true, "\(error?.description ?? "")")
        environment["DELIVERY_RETENTION"] = maxAge ?? "24h"
        #expect(throws: Never.self) { try Configuration.load(from: environment) }
    }

    /// A refused value is quoted in its problem: one set with a line break (or a terminal escape) in it stays on the
    /// setting's one line.
    @Test func refusedValue_withALineBreak_staysOnItsSettingsLine() throws {
        var environment = try Self.baseEnvironment()
        environment["EVENT_MAX_AGE"] = "2x\u{1B}[2J\r\nFAKE: forged"
        environment["LOG_LEVEL"] = "debug\nLOG_LEVEL: forged"
        let error = #expect(throws: ConfigurationErrors.self) { try Configuration.load(from: environment) }
        let lines = error?.description.split(separator: "\n", omittingEmptySubsequences: false) ?? []
        #expect(lines.count == 3, "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("FAKE") || $0.hasPrefix("LOG_LEVEL: forged") })
        #expect(error?.description.contains(#"got "2x\u{1B}[2J\r\nFAKE: forged""#) == true, "\(error?.description ?? "")")
    }

    @Test func nearMisses_suggestTheSettingAndIgnoreOtherVariables() {
        let misses = SettingNames.nearMisses(in: [
            "MAX_INFLIGHT": "5", "FCM_BASEURL": "https://x", "EVENT_MAX_AGES": "1h", "LOG_LEVL": "debug", "max_in_flight": "3",
            "MAX_IN_FLIGHT": "5", "PATH": "/bin", "NOTIFY_SOCKET": "/run/x", "DATABASE_PASSWORD_FILE": "/x", "LOGNAME": "root",
        ])
        #expect(misses.map(\.description) == [
            "EVENT_MAX_AGES is not a setting; did you mean EVENT_MAX_AGE?",
            "FCM_BASEURL is not a setting; did you mean FCM_BASE_URL?",
            "LOG_LEVL is not a setting; did you mean LOG_LEVEL?",
            "MAX_INFLIGHT is not a setting; did you mean MAX_IN_FLIGHT?",
            "max_in_flight is not a setting; did you mean MAX_IN_FLIGHT?",
        ])
        #expect(SettingNames.nearMisses(in: Dictionary(uniqueKeysWithValues: SettingNames.all.map { ($0, "x") })).isEmpty)
    }

    @Test func durations_acceptEveryUnitAndBareSeconds() {
        #expect(ValueParsing.duration("250ms") == .milliseconds(250))
        #expect(ValueParsing.duration("2s") == .seconds(2))
        #expect(ValueParsing.duration("15m") == .seconds(900))
        #expect(ValueParsing.duration("6h") == .seconds(21_600))
        #expect(ValueParsing.duration("7d") == .seconds(604_800))
        #expect(ValueParsing.duration("90") == .seconds(90))
        #expect(ValueParsing.duration("1.5h") == nil)
        #expect(ValueParsing.duration("-3s") == nil)
        #expect(ValueParsing.duration("3w") == nil)
    }

    /// Issue 45: `999999999999999d` overflowed Int64 (a trap); past 100 years a duration is refused as too large.
    @Test func durations_thatOverflowOrPassTheMaximum_areRefusedAsTooLarge() throws {
        for text in ["999999999999999d", "99999999999999999999", "36501d", "9223372036854775807ms"] {
            #expect(ValueParsing.duration(text) == nil, "\(text)")
            #expect(ValueParsing.durationIsTooLarge(text), "\(text)")
        }
        #expect(ValueParsing.duration("36500d") == .seconds(36_500 * 86_400))
        #expect(!ValueParsing.durationIsTooLarge("3w"))
        var environment = try Self.baseEnvironment()
        environment["OUTBOX_RETENTION"] = "999999999999999d"
        #expect(throws: (any Error).self) { try Configuration.load(from: environment) }
        do { _ = try Configuration.load(from: environment) } catch {
            #expect("\(error)".contains(#"OUTBOX_RETENTION: must be at most 36500d (100 years)"#), "\(error)")
        }
    }

    /// Issue 45: libpq quotes the part of a connection string it cannot parse; the redaction check-config, the journal
    /// and the Postgres module share hides every quoted part of such a complaint.
    @Test func redactConninfo_hidesWhatLibpqQuotesFromABadConnectionString() {
        let complaints = [
            #"postgres connectionFailed: invalid percent-encoded token: "s3cr%t pa55word""#,
            #"postgres connectionFailed: missing "=" after "pa55word" in connection info string"#,
            #"unexpected spaces found in "s3cr%t pa55word", use percent-encoded spaces (%20) instead"#,
            #"invalid URI query parameter: "pa55"word""#,
        ]
        for text in complaints {
            let redacted = ValueParsing.redactConninfo(text)
            #expect(!redacted.contains("s3cr") && !redacted.contains("pa55"), "\(redacted)")
        }
        #expect(ValueParsing.redactConninfo(complaints[0]) == #"postgres connectionFailed: invalid percent-encoded token: "***""#)
        #expect(ValueParsing.redactConninfo(complaints[1]) == #"postgres connectionFailed: missing "***" in connection info string"#)
        // Other libpq text keeps its quotes: they name a host or a user, which an operator needs.
        let refused = #"connection to server at "db.internal" (10.0.0.5), port 5432 failed: Connection refused"#
        #expect(ValueParsing.redactConninfo(refused) == refused)
    }

    @Test func redactedDescription_hidesDatabasePassword() throws {
        var environment = try Self.baseEnvironment()
        environment["DATABASE_URL"] = "postgresql://worker:s3cret-pass@db.internal:5432/app?sslmode=require"
        let text = try Configuration.load(from: environment).redactedDescription
        #expect(!text.contains("s3cret-pass"))
        #expect(text.contains("postgresql://worker:***@db.internal:5432/app"))
        #expect(ValueParsing.redactConninfo("host=db password='a b' user=w") == "host=db password=*** user=w")
        // A combining mark right after the separator must not hide the secret from the pattern (scalar matching).
        #expect(!ValueParsing.redactConninfo("host=db password=\u{301}secret").contains("secret"))
        #expect(!ValueParsing.redactConninfo("postgres://u:\u{301}secret@h/db").contains("secret"))
    }

    /// The proxy for outbound HTTPS, in libcurl's order of variables; what `check-config` shows of it, the password
    /// hidden.
    @Test func httpsProxy_isReadInLibcurlsOrder_andShownWithoutItsPassword() throws {
        var environment = try Self.baseEnvironment()
        var text = try Configuration.load(from: environment).redactedDescription
        #expect(text.contains("HTTPS_PROXY=(none: direct)") && text.contains("NO_PROXY=(none)"))

        environment["ALL_PROXY"] = "socks5h://gw:1080"
        environment["HTTPS_PROXY"] = "http://egress:s3cret@squid.internal:3128"
        environment["NO_PROXY"] = "localhost,.internal"
        var configuration = try Configuration.load(from: environment)
        #expect(configuration.httpsProxy?.variable == "HTTPS_PROXY" && configuration.noProxy == "localhost,.internal")
        text = configuration.redactedDescription
        #expect(text.contains("HTTPS_PROXY=http://egress:***@squid.internal:3128 (from HTTPS_PROXY)"), "\(text)")
        #expect(text.contains("NO_PROXY=localhost,.internal") && !text.contains("s3cret"))

        environment["https_proxy"] = "squid2:8080"
        configuration = try Configuration.load(from: environment)
        #expect(configuration.httpsProxy?.variable == "https_proxy" && configuration.httpsProxy?.url == "squid2:8080")
        environment["https_proxy"] = nil
        environment["HTTPS_PROXY"] = nil
        #expect(try Configuration.load(from: environment).httpsProxy?.variable == "ALL_PROXY")
    }

    /// libcurl would fail every send with a proxy it cannot use; the daemon refuses to start instead, naming the
    /// variable, without echoing a password.
    @Test(arguments: [
        ("HTTPS_PROXY", "ftp://squid:3128", "names the scheme \"ftp\""),
        ("https_proxy", "http://user:s3cret@squid:99999", "must be a proxy URL"),
        ("ALL_PROXY", "http://squid:3128/path", "must be a proxy URL"),
        ("HTTPS_PROXY", "http://", "must be a proxy URL"),
        ("HTTPS_PROXY", "http://sq uid:3128", "must be a proxy URL"),
        ("HTTPS_PROXY", "http://[::1:3128", "must be a proxy URL"),
    ])
    func badProxy_isAConfigurationErrorNamingTheVariable(variable: String, value: String, problem: String) throws {
        var environment = try Self.baseEnvironment()
        environment[variable] = value
        #expect {
            try Configuration.load(from: environment)
        } throws: { error in
            guard let errors = error as? ConfigurationErrors, errors.errors.count == 1 else { return false }
            return errors.errors[0].variable == variable && errors.errors[0].problem.contains(problem)
                && !errors.errors[0].problem.contains("s3cret")
        }
    }

    @Test(arguments: ["squid:3128", "http://squid.internal:3128", "HTTPS://squid:443/", "socks5h://gw", "http://u:p@[::1]:3128",
                      "http://10.0.0.7:3128", "socks4a://gw_1.corp:1080"])
    func goodProxy_isAccepted(value: String) throws {
        var environment = try Self.baseEnvironment()
        environment["HTTPS_PROXY"] = value
        #expect(try Configuration.load(from: environment).httpsProxy?.url == value)
    }

    @Test func appStore_allSettingsTogetherEnableIt() throws {
        var environment = try Self.baseEnvironment()
        let key = try TestBinaries.temporaryFile("key", suffix: ".p8")
        let root = try TestBinaries.temporaryFile("root", suffix: ".cer")
        environment["APPSTORE_ISSUER_ID"] = "issuer"
        environment["APPSTORE_KEY_ID"] = "KEY123"
        environment["APPSTORE_BUNDLE_ID"] = "jp.example.app"
        environment["APPSTORE_PRIVATE_KEY_FILE"] = key
        environment["APPSTORE_ROOT_CERT_FILES"] = "\(root), \(root)"
        let appStore = try #require(try Configuration.load(from: environment).appStore)
        #expect(appStore.rootCertificateFiles == [root, root])
        #expect(appStore.productionURL == "https://api.storekit.apple.com")
        #expect(appStore.sandboxURL == "https://api.storekit-sandbox.apple.com")
    }
}
