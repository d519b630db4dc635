import FCM
import FCMEmulator
import Foundation
import HTTP
import HTTPServer
import Logging
import Metrics
import Testing
import TestSupport

/// The sender against the loopback emulator over real TLS.
@Suite("FCM sender against the emulator")
struct FCMSenderTests {
    struct Rig {
        let emulator: FCMEmulator
        let sender: FCMSender
        let metrics: MetricsRegistry
        let serviceAccountFile: String
    }

    static func rig(trust: Bool = true, signingKey: String? = nil, tokenLifetime: Int = 3600,
                    now: @escaping @Sendable () -> Date = Date.init) throws -> Rig {
        let fixtures = TLSFixtures.shared
        let keys = try fixtures.rsaKeyPair()
        var configuration = FCMEmulator.Configuration(
            assertionPublicKeyPEM: keys.publicPEM,
            tls: TLSIdentity(certificatePEM: fixtures.serverCertificatePEM, privateKeyPEM: fixtures.serverKeyPEM))
        configuration.clientEmail = "worker@test-project.iam.gserviceaccount.com"
        configuration.tokenLifetime = tokenLifetime
        let emulator = try FCMEmulator(configuration: configuration)
        let file = try fixtures.serviceAccountFile(privateKeyPEM: signingKey ?? keys.privatePEM, tokenURI: emulator.tokenURI)
        let metrics = MetricsRegistry()
        let sender = try FCMSender(
            configuration: FCMConfiguration(serviceAccount: try ServiceAccount.load(path: file), baseURL: emulator.baseURL,
                                            http: HTTPClientConfiguration(maxInFlight: 20, caFile: trust ? fixtures.caFile : nil)),
            logger: Logger(label: "fcm", sink: MemorySink()), metrics: metrics, now: now)
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
        ("unregistered-1", SendOutcome.tokenInvalid(reason: "UNREGISTERED")),
        ("mismatch-1", .tokenInvalid(reason: "SENDER_ID_MISMATCH")),
        ("invalid-1", .tokenInvalid(reason: "INVALID_ARGUMENT")),
        ("invalidtokenfield-1", .tokenInvalid(reason: "INVALID_ARGUMENT")),
        ("badarg-1", .permanentFailure(reason: "INVALID_ARGUMENT: Request contains an invalid argument.")),
        ("payload-1", .permanentFailure(reason: "INVALID_ARGUMENT: bad field message.apns.payload")),
        ("denied-1", .retry(reason: "PROJECT_FAULT: PERMISSION_DENIED", after: nil, minimumBackoff: nil)),
        ("thirdparty-1", .permanentFailure(reason: "THIRD_PARTY_AUTH_ERROR")),
        ("quota-1", .retry(reason: "QUOTA_EXCEEDED", after: .seconds(30), minimumBackoff: nil)),
        ("quotanoretry-1", .retry(reason: "QUOTA_EXCEEDED", after: nil, minimumBackoff: .seconds(60))),
        ("unavailable-1", .retry(reason: "UNAVAILABLE", after: .seconds(30), minimumBackoff: nil)),
        ("internal-1", .retry(reason: "INTERNAL", after: nil, minimumBackoff: nil)),
    ])
    func errorTable_overTheWire(token: String, expected: SendOutcome) async throws {
        let rig = try Self.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        #expect(await rig.sender.send(Self.push(token)) == expected)
        #expect(rig.emulator.receivedMessages.isEmpty)
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
        clock.now = Date()  // the cached token now has < 5 minutes left (by this clock)
        _ = await rig.sender.send(Self.push("good-3"))
        #expect(rig.emulator.stats.tokensIssued == 2)
        #expect(rig.emulator.receivedMessages.count == 3)
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
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date
    init(_ start: Date) { current = start }
    var now: Date {
        get { lock.withLock { current } }
        set { lock.withLock { current = newValue } }
    }
}
