import Foundation
import AppStore
import Crypto
import HTTP
@testable import OperatorCommands
import TestSupport
import Testing

/// `check-config --online`'s App Store line against the loopback App Store Server API: one authenticated Get
/// Transaction Info for an id that names no purchase. Apple's 404 proves the key, issuer and bundle; a 401 names the
/// settings to check; a 429 says to try again.
@Suite("check-config --online: the App Store Server API", .blockingFixtures)
struct CheckConfigAppStoreTests {
    static func configuration(_ fake: FakeAppStore) throws -> AppStoreConfiguration {
        let pki = ApplePKI.shared
        return AppStoreConfiguration(
            issuerId: "issuer-1", keyId: "KEY123", bundleId: EntitlementRecheckerTests.bundle, privateKey: try PrivateKey(pem: pki.apiKeyPEM),
            roots: [try Certificate(pemOrDER: Array(pki.rootPEM.utf8))], productionURL: fake.baseURL, sandboxURL: fake.baseURL,
            http: HTTPClientConfiguration(maxInFlight: 2, caFile: TLSFixtures.shared.caFile))
    }

    static func fake() throws -> FakeAppStore {
        try FakeAppStore(apiPublicKeyPEM: ApplePKI.shared.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1",
                         bundleId: EntitlementRecheckerTests.bundle)
    }

    @Test func keyAccepted_isOk_namingTheIdentityAndTheUnknownTransaction() async throws {
        let fake = try Self.fake()
        defer { fake.stop() }
        let check = await OnlineChecks.appStoreAPI(try Self.configuration(fake))
        #expect(check.check == "app_store")
        #expect(check.ok, "\(check.detail)")
        #expect(check.detail == "\(fake.baseURL) accepted key KEY123, issuer issuer-1, bundle \(EntitlementRecheckerTests.bundle) (an unknown transaction: 404 4040010)")
        #expect(fake.requests == [OnlineChecks.unknownTransactionId])
    }

    @Test func keyRefused_failsNamingTheSettings() async throws {
        let fake = try Self.fake()
        defer { fake.stop() }
        fake.refuseAll()
        let check = await OnlineChecks.appStoreAPI(try Self.configuration(fake))
        #expect(!check.ok)
        #expect(check.detail.contains("answered 401: Apple refuses key KEY123, issuer issuer-1"), "\(check.detail)")
        #expect(check.detail.contains("APPSTORE_KEY_ID, APPSTORE_ISSUER_ID, APPSTORE_BUNDLE_ID and the .p8"))
    }

    @Test func rateLimited_failsSayingToTryAgain() async throws {
        let fake = try Self.fake()
        defer { fake.stop() }
        fake.answer(OnlineChecks.unknownTransactionId, .rateLimited(retryAtMillis: Int64(Date().timeIntervalSince1970 * 1000) + 60_000))
        let check = await OnlineChecks.appStoreAPI(try Self.configuration(fake))
        #expect(!check.ok)
        #expect(check.detail.hasSuffix("answered 429 (rate limited): try again shortly"), "\(check.detail)")
    }
}
