import FCM
import FCMEmulator
import Foundation
import HTTP
import HTTPServer
import Logging
import Metrics
import Push
import Synchronization
import TestSupport
import Testing

/// The sender against the loopback emulator over real TLS.
@Suite("FCM sender against the emulator", .blockingFixtures)
struct FCMSenderTests {
    struct Rig {
        let emulator: FCMEmulator
        let sender: FCMSender
        let metrics: MetricsRegistry
        let serviceAccountFile: String
    }

    /// `quotaPause`: the least pause after the project's QUOTA_EXCEEDED without Retry-After (FCM's 60 s; none here, so a
    /// test waits only the gate's own backoff); `projectQuota`: the emulator's (nil: none).
    static func rig(trust: Bool = true, signingKey: String? = nil, tokenLifetime: Int = 3600, maxInFlight: Int = 20,
                    maxSendsPerSecond: Double? = nil, quotaPause: Duration = .zero, projectQuota: (rate: Double, burst: Int)? = nil,
                    knownGoodTokens: @escaping @Sendable ([String]) async -> WitnessCandidates? = { _ in WitnessCandidates() },
                    now: @escaping @Sendable () -> Date = Date.init,
                    onHealth: @escaping @Sendable (FCMHealth) -> Void = { _ in },
                    onCredentials: @escaping @Sendable (AccessTokenProvider.Status) -> Void = { _ in }) throws -> Rig {
        let fixtures = TLSFixtures.shared
        let keys = try fixtures.rsaKeyPair()
        var configuration = fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM)
        configuration.clientEmail = "worker@test-project.iam.gserviceaccount.com"
        configuration.tokenLifetime = tokenLifetime
        configuration.projectQuota = projectQuota
        let emulator = try FCMEmulator(configuration: configuration)
        let file = try fixtures.serviceAccountFile(privateKeyPEM: signingKey ?? keys.privatePEM, tokenURI: emulator.tokenURI)
        let metrics = MetricsRegistry()
        let sender = try FCMSender(
            configuration: FCMConfiguration(serviceAccount: try ServiceAccount.load(path: file), baseURL: emulator.baseURL,
                                            http: HTTPClientConfiguration(maxInFlight: maxInFlight, caFile: trust ? fixtures.caFile : nil),
                                            maxSendsPerSecond: maxSendsPerSecond, quotaPause: quotaPause,
                                            knownGoodTokens: knownGoodTokens, witnessWait: .milliseconds(200)),
            logger: Logger(label: "fcm", sink: MemorySink()), metrics: metrics, now: now, onHealth: onHealth,
            onCredentials: onCredentials)
        return Rig(emulator: emulator, sender: sender, metrics: metrics, serviceAccountFile: file)
    }

    static func push(_ token: String, group: String? = "g1") -> DoseTakenPush {
        DoseTakenPush(token: token, eventKey: "doseTaken:\(group ?? "p1:2026-02-11:morning:08:03")", patientId: "p1",
                      displayName: "山田花子", date: "2026-02-11", slot: "morning", recordingGroupId: group, withinTime: false)
    }

    @Test func send_deliversTheExactMessage() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        let outcome = await rig.sender.send(Self.push("good-token-1", group: nil))
        guard case .sent(let name) = outcome else { Issue.record("not sent: \(outcome)"); return }
        #expect(name.hasPrefix("projects/test-project/messages/"))
        let received = try #require(rig.emulator.receivedMessages.first)
        #expect(received.projectId == "test-project")
        let message = try #require((try JSONSerialization.jsonObject(with: Data(received.json.utf8)) as? [String: Any])?["message"] as? [String: Any])
        #expect(message["notification"] as? [String: String] == ["title": "服薬記録", "body": "山田花子さんが薬を服用しました"])
        #expect((message["data"] as? [String: String])?["recordingGroupId"] == "")
    }

    @Test(arguments: [
        // Alone, where no token ever received a push (a new deployment), a disabling answer is an unwitnessed disable
        // (the fleet's allowance holds those: DisableWitnessFleetTests); `disablingAnswers_amongHealthyDevices_disable`
        // has them witnessed.
        ("unregistered-1", SendOutcome.tokenInvalid(.unregistered, witnessed: false)),
        ("notfound-1", .tokenInvalid(.notFound, witnessed: false)),
        ("mismatch-1", .tokenInvalid(.senderIdMismatch, witnessed: false)),
        ("invalid-1", .tokenInvalid(.invalidToken, witnessed: false)),
        ("invalidtokenfield-1", .tokenInvalid(.invalidToken, witnessed: false)),
        ("apnsdisabled-1", .tokenInvalid(.invalidToken, witnessed: false)),
        ("badarg-1", .permanentFailure(reason: "INVALID_ARGUMENT: Request contains an invalid argument.")),
        ("payload-1", .permanentFailure(reason: "INVALID_ARGUMENT: bad field message.apns.payload")),
        ("denied-1", .retry(reason: "PROJECT_FAULT: PERMISSION_DENIED", after: nil, minimumBackoff: nil)),
        ("thirdparty-1", .permanentFailure(reason: "THIRD_PARTY_AUTH_ERROR")),
        ("quota-1", .retry(reason: "QUOTA_EXCEEDED", after: .seconds(30), minimumBackoff: nil)),
        ("quotanoretry-1", .retry(reason: "QUOTA_EXCEEDED", after: nil, minimumBackoff: .seconds(60))),
        ("projectquota-1", .retry(reason: "QUOTA_EXCEEDED", after: nil, minimumBackoff: .seconds(60))),
        ("devicequota-1", .retry(reason: "QUOTA_EXCEEDED_DEVICE", after: .seconds(20), minimumBackoff: nil)),
        ("unavailable-1", .retry(reason: "UNAVAILABLE", after: .seconds(30), minimumBackoff: nil)),
        ("internal-1", .retry(reason: "INTERNAL", after: nil, minimumBackoff: nil)),
    ])
    func errorTable_overTheWire(token: String, expected: SendOutcome) async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        #expect(await rig.sender.send(Self.push(token)) == expected)
        #expect(rig.emulator.receivedMessages.isEmpty)
    }

    /// After a healthy answer, each dead token is witnessed, whatever the answer: by a 200 answered after its send
    /// began, or (sent one at a time here, so none comes) by a dry run to the token FCM last accepted.
    @Test func disablingAnswers_afterAHealthyAnswer_areWitnessed() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        guard case .sent = await rig.sender.send(Self.push("good-0")) else { Issue.record("not sent"); return }
        let expected: [(String, SendOutcome)] = [
            ("unregistered-1", .tokenInvalid(.unregistered, witnessed: true)),
            ("notfound-1", .tokenInvalid(.notFound, witnessed: true)),
            ("invalid-1", .tokenInvalid(.invalidToken, witnessed: true)),
            ("invalidtokenfield-1", .tokenInvalid(.invalidToken, witnessed: true)),
            ("apnsdisabled-1", .tokenInvalid(.invalidToken, witnessed: true)),
            ("mismatch-1", .tokenInvalid(.senderIdMismatch, witnessed: true)),
        ]
        for (token, outcome) in expected {
            #expect(await rig.sender.send(Self.push(token)) == outcome, "\(token)")
        }
        #expect(rig.metrics.value("fcm_disabling_answers_total", labels: ["answer": "NOT_FOUND", "verdict": "witnessed"]) == 1)
        #expect(rig.metrics.value("fcm_dry_runs_total", labels: ["result": "accepted"]) == 6)
        // A dry run reaches no phone.
        #expect(rig.emulator.receivedMessages.count == 1)
        #expect(rig.metrics.value("fcm_send_paused", labels: ["cause": "project"]) == 0)

        // Sent together with healthy devices, a dead token is witnessed by their 200s: no dry run.
        async let dead = rig.sender.send(Self.push("unregistered-2"))
        for index in 1..<50 { _ = await rig.sender.send(Self.push("good-\(index)")) }
        #expect(await dead == .tokenInvalid(.unregistered, witnessed: true))
        #expect(rig.metrics.value("fcm_dry_runs_total", labels: ["result": "accepted"]) == 6)
    }

    /// The phone this process last saw accepted was uninstalled since; another owner's phone is still good. A made-up
    /// token's answer is witnessed by the good one: no project fault, no pause (before, the dry run asked only the last
    /// accepted token, took its UNREGISTERED for the project's, and a hostile app's made-up tokens held every
    /// caregiver's pushes while it lasted).
    @Test func theLastAcceptedPhoneDied_anotherOwnersPhoneWitnesses_noPause() async throws {
        let rig = try Self.rig(knownGoodTokens: { suspects in
            WitnessCandidates(tokens: ["good-a", "good-b"].filter { !suspects.contains($0) })
        })
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        guard case .sent = await rig.sender.send(Self.push("good-a")) else { Issue.record("not sent"); return }
        rig.emulator.unregister("good-a")
        #expect(await rig.sender.send(Self.push("invalid-made-up-1")) == .tokenInvalid(.invalidToken, witnessed: true))
        #expect(rig.metrics.value("fcm_send_paused", labels: ["cause": "project"]) == 0)
        #expect(rig.metrics.value("fcm_dry_runs_total", labels: ["result": "refused"]) == 1)
        #expect(rig.metrics.value("fcm_dry_runs_total", labels: ["result": "accepted"]) == 1)
    }

    /// A project that breaks mid-flight: a 200 to a send FCM took before the fault, answered after a healthy device's
    /// NOT_FOUND, is no witness against it (before, it was, and the device was disabled). The dry run, sent after the
    /// answer, finds the project at fault: the send is retried, nothing disabled.
    @Test func aTwoHundredFromBeforeAMidFlightFault_witnessesNothing() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        guard case .sent = await rig.sender.send(Self.push("good-0")) else { Issue.record("not sent"); return }
        // Taken by FCM now, answered 150 ms later (the emulator checks the project before a slow token's wait).
        async let early = rig.sender.send(Self.push("slow150-good-1", group: "g-early"))
        try await Task.sleep(for: .milliseconds(40))
        rig.emulator.setProjectFault(.notFound)
        let healthy = await rig.sender.send(Self.push("good-2", group: "g-healthy"))
        guard case .sent = await early else { Issue.record("the early send was not accepted"); return }
        guard case .retry(let reason, _, _) = healthy else { Issue.record("healthy device judged \(healthy)"); return }
        #expect(reason.hasPrefix("PROJECT_FAULT"), "\(reason)")
        #expect(rig.metrics.value("fcm_disabling_answers_total", labels: ["answer": "NOT_FOUND", "verdict": "witnessed"]) == 0)
    }

    @Test func retryAfterAsHTTPDate_overTheWire() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        let outcome = await rig.sender.send(Self.push("unavailabledate-1"))
        guard case .retry("UNAVAILABLE", let after?, nil) = outcome else { Issue.record("got \(outcome)"); return }
        #expect(after > .seconds(40) && after <= .seconds(46))
    }

    @Test func payloadBug_isToldApartFromADeadToken() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        let token = try await rig.sender.tokens.token()
        let body = #"{"message":{"token":"good","data":{"count":3}}}"#
        let response = try await rig.sender.http.execute(HTTPRequest(
            method: "POST", url: "\(rig.emulator.baseURL)/v1/projects/test-project/messages:send",
            headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"], body: Array(body.utf8)))
        let result = FCMResponseClassifier.classify(status: response.status, headers: response.headers, body: response.body)
        guard case .outcome(.permanentFailure(let reason)) = result else { Issue.record("got \(result)"); return }
        #expect(reason.contains("message.data[count].value"))
    }

    /// Posts a raw body to the emulator as the sender would, and classifies the answer.
    static func post(_ rig: Rig, _ body: String) async throws -> FCMResponseClassifier.Result {
        let token = try await rig.sender.tokens.token()
        let response = try await rig.sender.http.execute(HTTPRequest(
            method: "POST", url: "\(rig.emulator.baseURL)/v1/projects/test-project/messages:send",
            headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"], body: Array(body.utf8)))
        return FCMResponseClassifier.classify(status: response.status, headers: response.headers, body: response.body)
    }

    /// The emulator refuses what FCM refuses: a body over 4,096 bytes (400 naming no field), APNs headers APNs would
    /// not take, an analytics label outside FCM's pattern; and it takes the worker's message with a 3,000-character
    /// name, shortened to fit, carrying the alert headers.
    @Test func emulator_refusesOversizedBodiesAndBadAPNsHeaders_andTakesALongNameShortened() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        let big = #"{"message":{"token":"good","notification":{"body":""# + String(repeating: "a", count: 4_100) + #""}}}"#
        #expect(try await Self.post(rig, big) == .outcome(.permanentFailure(reason: "INVALID_ARGUMENT: Request contains an invalid argument.")))
        for headers in [#"{"apns-priority":"7"}"#, #"{"apns-push-type":"alarm"}"#, #"{"apns-expiration":"tomorrow"}"#,
                        #"{"apns-priority":10}"#, #"{"apns-push-type":"background","apns-priority":"10"}"#] {
            let result = try await Self.post(rig, #"{"message":{"token":"good","apns":{"headers":"# + headers + "}}}")
            #expect(result == .outcome(.permanentFailure(reason: "INVALID_ARGUMENT: bad field message.apns.headers")), "\(headers)")
        }
        let label = try await Self.post(rig, #"{"message":{"token":"good","fcm_options":{"analytics_label":"dose taken!"}}}"#)
        #expect(label == .outcome(.permanentFailure(reason: "INVALID_ARGUMENT: bad field message.fcm_options.analytics_label")))

        var push = Self.push("good-token-long")
        push.displayName = String(repeating: "患", count: 3_000)
        push.expiration = 1_770_850_000
        guard case .sent = await rig.sender.send(push) else { Issue.record("a long name was not delivered"); return }
        let received = try #require(rig.emulator.receivedMessages.last)
        #expect(received.json.utf8.count <= 4096)
        let message = try #require((try JSONSerialization.jsonObject(with: Data(received.json.utf8)) as? [String: Any])?["message"] as? [String: Any])
        #expect((message["apns"] as? [String: Any])?["headers"] as? [String: String] == [
            "apns-collapse-id": "8a08d40e4d98c3a2485ee81c4bef27ee7ffb14476f00781ee3af50aaea700bef", "apns-push-type": "alert", "apns-priority": "10", "apns-expiration": "1770850000"])
        #expect(((message["notification"] as? [String: String])?["body"])?.contains("患…さんが薬を服用しました") == true)
    }

    /// One device over its message rate backs off alone: sending is not paused and other devices go on at once;
    /// the project's quota still pauses the sender.
    @Test func deviceQuota_backsOffThatDeviceAlone_projectQuotaPauses() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        for index in 0..<8 {
            #expect(await rig.sender.send(Self.push("devicequota-\(index)")) == .retry(reason: "QUOTA_EXCEEDED_DEVICE", after: .seconds(20),
                                                                                      minimumBackoff: nil))
        }
        #expect(rig.metrics.value("fcm_send_paused", labels: ["cause": "overload"]) == 0)
        // Nor does it change the send rate.
        #expect(rig.sender.sendRateLimit == nil)
        #expect(rig.metrics.value("fcm_quota_exceeded_total") == 0)
        guard case .sent = await rig.sender.send(Self.push("good-after-device-quota")) else { Issue.record("another device was held"); return }
        for index in 0..<8 { _ = await rig.sender.send(Self.push("projectquota-\(index)")) }
        #expect(rig.metrics.value("fcm_send_paused", labels: ["cause": "overload"]) == 1)
        #expect(rig.metrics.value("fcm_quota_exceeded_total") == 8)
    }

    /// Sends that wait in libcurl for a connection another send is opening, and reach their deadline there, never
    /// reached FCM: they are retried without counting against FCM. Only a send that owns a stuck connection is a
    /// connection fault, one of the five in a row that pause the sender (eight such faults paused it before). At most
    /// four sends to a server not yet known to multiplex start at once, so the eight go in waves of one owner each: two
    /// when they reach the client together, more when a loaded machine hands them over a few at a time. Up to four
    /// owners, the other sends' eight failures would have paused the sender had they counted.
    @Test func sendsWaitingForAStuckConnection_areNotFaultsOfFCM() async throws {
        let fixtures = TLSFixtures.shared
        let keys = try fixtures.rsaKeyPair()
        let emulator = try FCMEmulator(configuration: fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM))
        defer { emulator.stop() }
        let silent = LoopbackSocket()  // accepts, never completes a TLS handshake
        defer { silent.close() }
        let file = try fixtures.serviceAccountFile(privateKeyPEM: keys.privatePEM, tokenURI: emulator.tokenURI)
        let metrics = MetricsRegistry()
        let sender = try FCMSender(
            configuration: FCMConfiguration(serviceAccount: try ServiceAccount.load(path: file), baseURL: "https://127.0.0.1:\(silent.port)",
                                            http: HTTPClientConfiguration(maxInFlight: 20, requestTimeout: .seconds(1), caFile: fixtures.caFile)),
            logger: Logger(label: "fcm", sink: MemorySink()), metrics: metrics)
        defer { sender.shutdown() }
        let outcomes = await withTaskGroup(of: SendOutcome.self) { group in
            for index in 0..<8 { group.addTask { await sender.send(Self.push("stuck-\(index)")) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let reasons = outcomes.map { outcome -> String in
            guard case .retry(let reason, _, _) = outcome else { return "\(outcome)" }
            return String(reason.prefix { $0 != ":" })
        }
        #expect(reasons.allSatisfy { $0 == "TRANSPORT_QUEUED" || $0 == "TRANSPORT_TIMEOUT" }, "\(reasons)")
        #expect((1...4).contains(reasons.filter { $0 == "TRANSPORT_TIMEOUT" }.count), "\(reasons)")
        #expect(metrics.value("fcm_send_paused", labels: ["cause": "connection"]) == 0)
    }

    @Test func oneTokenFetch_servesManySends() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        await withTaskGroup(of: SendOutcome.self) { group in
            for index in 0..<50 { group.addTask { await rig.sender.send(Self.push("good-\(index)")) } }
        }
        #expect(rig.emulator.receivedMessages.count == 50)
        #expect(rig.emulator.stats.tokensIssued == 1)
        #expect(rig.metrics.value("fcm_token_refreshes_total") == 1)
    }

    @Test func tokenIsRefreshedBeforeExpiry_withAnInjectedClock() async throws {
        let clock = TestClock(Date().addingTimeInterval(-3400))
        let rig = try Self.rig(now: { clock.now })
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        _ = await rig.sender.send(Self.push("good-1"))
        _ = await rig.sender.send(Self.push("good-2"))
        #expect(rig.emulator.stats.tokensIssued == 1)
        clock.now = Date()  // the cached token now has < 5 minutes left (by this clock), more than 1 minute
        // The send does not wait for Google: it goes out with the old token while a refresh runs in the background.
        let requestsBefore = rig.emulator.stats.tokenRequests
        guard case .sent = await rig.sender.send(Self.push("good-3")) else { Issue.record("not sent"); return }
        try await eventually("the background refresh issues a second token") { rig.emulator.stats.tokensIssued == 2 }
        #expect(rig.emulator.receivedMessages.count == 3)
        #expect(rig.emulator.stats.tokenRequests == requestsBefore + 1)
    }

    /// Google refuses the service account (400 invalid_grant "Invalid JWT Signature."): sends are retried, never
    /// FAILED; token requests are backed off (at most 10 a minute, never two within 5 s); readiness names Google's
    /// error; once Google accepts the assertion again, sending resumes by itself.
    @Test func tokenEndpointRefusing_isBackedOff_reported_andRecoversByItself() async throws {
        // The clock starts in the past so that, moved on by the test, the assertions' iat stays acceptable to the emulator.
        let clock = TestClock(Date().addingTimeInterval(-200))
        let statuses = Recorder<AccessTokenProvider.Status>()
        let rig = try Self.rig(now: { clock.now }, onCredentials: { status in statuses.record(status) })
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        rig.emulator.refuseTokens()
        for second in 0..<60 {
            for _ in 0..<5 { _ = try? await rig.sender.tokens.token() }
            if second == 0 {
                let outcome = await rig.sender.send(Self.push("good-1"))
                #expect(outcome == .retry(reason: "OAUTH_TOKEN_UNAVAILABLE", after: nil, minimumBackoff: nil))
            }
            clock.now = clock.now.addingTimeInterval(1)
        }
        let requests = rig.emulator.stats.tokenRequests
        #expect(requests >= 2 && requests <= 10, "\(requests) token requests in 60 s of refusal")
        let last = try #require(statuses.last)
        guard case .failing(let reason) = last else { Issue.record("readiness not told: \(last)"); return }
        #expect(reason.contains("invalid_grant: Invalid JWT Signature."))
        #expect(rig.emulator.receivedMessages.isEmpty)

        rig.emulator.refuseTokens(nil)
        clock.now = clock.now.addingTimeInterval(61)
        // The sender paused for the project fault: this send is held until the pause ends (at most 10 s), then goes out.
        let outcome = await rig.sender.send(Self.push("good-2"))
        guard case .sent = outcome else { Issue.record("not sent after Google accepted again: \(outcome)"); return }
        #expect(statuses.last == .ok)
        #expect(rig.emulator.stats.tokensIssued == 1)
    }

    @Test func unauthenticated_refreshesOnceAndSucceeds() async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        _ = await rig.sender.send(Self.push("good-1"))
        rig.emulator.revokeAccessTokens()
        let outcome = await rig.sender.send(Self.push("good-2"))
        guard case .sent = outcome else { Issue.record("got \(outcome)"); return }
        #expect(rig.emulator.stats.tokensIssued == 2)
        #expect(rig.emulator.stats.sendsByOutcome["unauthenticated"] == 1)
    }

    @Test func emulator_refusesAssertionSignedByTheWrongKey() async throws {
        let other = try TLSFixtures.shared.rsaKeyPair()
        let rig = try Self.rig(signingKey: other.privatePEM)
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        let error = await #expect(throws: FCMError.self) { try await rig.sender.checkCredentials() }
        #expect(error?.message.contains("Invalid JWT Signature") == true)
        #expect(rig.emulator.stats.tokensIssued == 0)
        guard case .retry = await rig.sender.send(Self.push("good-1")) else { Issue.record("sent without a token"); return }
        #expect(rig.emulator.receivedMessages.isEmpty)
    }

    @Test func emulator_refusesAStaleAssertion() async throws {
        let rig = try Self.rig(now: { Date().addingTimeInterval(-7200) })
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        let error = await #expect(throws: FCMError.self) { try await rig.sender.checkCredentials() }
        #expect(error?.message.contains("short-lived") == true)
        #expect(rig.emulator.stats.assertionsRefused == 1)
    }

    @Test func untrustedServerCertificate_failsClearlyAndSendsNothing() async throws {
        let rig = try Self.rig(trust: false)
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        let error = await #expect(throws: FCMError.self) { try await rig.sender.checkCredentials() }
        #expect(error?.message.contains("tls") == true)
        let outcome = await rig.sender.send(Self.push("good-1"))
        guard case .retry = outcome else { Issue.record("got \(outcome)"); return }
        #expect(rig.emulator.stats.tokensIssued == 0)
        #expect(rig.emulator.receivedMessages.isEmpty)
    }
}

/// A settable clock for token-expiry tests.
final class TestClock: Sendable {
    private let current: Mutex<Date>
    init(_ start: Date) { current = Mutex(start) }
    var now: Date {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
}
