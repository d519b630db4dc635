import AppStore
import Crypto
import Foundation
import HTTP
import Logging
import Metrics
import Postgres
import Testing
import TestSupport

@Suite("Entitlement re-evaluation against the App Store", .serialized, .blockingFixtures)
struct EntitlementRecheckerTests {
    static let bundle = "jp.example.medication"

    struct Rig {
        let production: FakeAppStore
        let sandbox: FakeAppStore
        let rechecker: EntitlementRechecker
        let metrics: MetricsRegistry
        let db: PostgresClient
        let configuration: AppStoreConfiguration
        let conninfo: String

        func stop() {
            rechecker.shutdown()
            production.stop()
            sandbox.stop()
        }

        /// A new rechecker on the same database and fakes: a restarted worker (nothing kept in memory).
        func restarted() throws -> EntitlementRechecker {
            try EntitlementRechecker(configuration: configuration, conninfo: conninfo,
                                     logger: Logger(label: "appstore", sink: MemorySink()), metrics: MetricsRegistry())
        }
    }

    static func rig(_ conninfo: String, sink: MemorySink = MemorySink(), configure: (inout AppStoreConfiguration) -> Void = { _ in },
                    onKeyStatus: @escaping @Sendable (String?) -> Void = { _ in }) throws -> Rig {
        let pki = ApplePKI.shared
        let production = try FakeAppStore(apiPublicKeyPEM: pki.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1", bundleId: bundle)
        let sandbox = try FakeAppStore(apiPublicKeyPEM: pki.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1", bundleId: bundle)
        var configuration = AppStoreConfiguration(
            issuerId: "issuer-1", keyId: "KEY123", bundleId: bundle, privateKey: try PrivateKey(pem: pki.apiKeyPEM),
            roots: [try Certificate(pemOrDER: Array(pki.rootPEM.utf8))], productionURL: production.baseURL, sandboxURL: sandbox.baseURL,
            http: HTTPClientConfiguration(maxInFlight: 4, caFile: TLSFixtures.shared.caFile))
        configuration.productionRate = 1000
        configuration.sandboxRate = 1000
        configure(&configuration)
        let metrics = MetricsRegistry()
        let rechecker = try EntitlementRechecker(configuration: configuration, conninfo: conninfo,
                                                 logger: Logger(label: "appstore", sink: sink), metrics: metrics, onKeyStatus: onKeyStatus)
        return Rig(production: production, sandbox: sandbox, rechecker: rechecker, metrics: metrics, db: PostgresClient(conninfo: conninfo),
                   configuration: configuration, conninfo: conninfo)
    }

    static func insert(_ db: PostgresClient, id: String, transaction: String, environment: String = "Production", status: String = "ACTIVE",
                       revokedAt: String? = nil, product: String = "premium.monthly") async throws {
        try await db.query(#"""
            INSERT INTO "CaregiverEntitlement" (id, "caregiverId", "productId", "originalTransactionId", "transactionId", environment, status,
                "purchasedAt", "revokedAt", "revocationReason")
            VALUES (\#(id), 'c1', \#(product), \#(transaction), \#(transaction), \#(environment), \#(status), now(), \#(revokedAt)::timestamptz,
                    CASE WHEN \#(revokedAt)::timestamptz IS NULL THEN NULL ELSE '0' END)
            """#)
    }

    static func row(_ db: PostgresClient, _ id: String) async throws -> (status: EntitlementStatus, revokedAtMillis: Int64?, reason: String?, checked: Bool) {
        let row = try await db.query(#"""
            SELECT status, (extract(epoch FROM "revokedAt") * 1000)::bigint AS revoked_ms, "revocationReason", "lastCheckedAt" IS NOT NULL AS checked
            FROM "CaregiverEntitlement" WHERE id = \#(id)
            """#)[0]
        return (try row["status"].decode(EntitlementStatus.self), try row["revoked_ms"].optionalInt().map(Int64.init), row["revocationReason"].optionalString(),
                try row["checked"].bool())
    }

    /// Through PgBouncer in transaction mode: one instance at a time by the `entitlements` lease row, a refund
    /// still revoked, and no lock left on the pooler's server connections.
    @Test func throughPgBouncer_oneInstanceAtATime_revokes_andLeavesNoLock() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.rig(try TestDatabase.poolerConninfo(conninfo))
            defer { rig.stop() }
            let second = try rig.restarted()
            defer { second.shutdown() }
            let pki = ApplePKI.shared
            try await Self.insert(rig.db, id: "e-refunded", transaction: "1000000001")
            rig.production.answer("1000000001", .signed(try pki.signedTransaction(
                ApplePKI.payload(transactionId: "1000000001", original: "1000000001", revocationDate: 1_770_000_123_456, revocationReason: 1))))
            let direct = try PostgresConnection(conninfo: conninfo)
            let other = SingletonLease(name: "entitlements", duration: .seconds(60))
            #expect(try other.acquire(direct))
            #expect(try await rig.rechecker.runOnce().ranPass == false)
            #expect(try await second.runOnce().ranPass == false)
            try other.release(direct)
            let summary = try await rig.rechecker.runOnce()
            #expect(summary.ranPass && summary.revoked == 1)
            #expect(try await Self.row(rig.db, "e-refunded").status == .revoked)
            #expect(try await second.runOnce().ranPass)  // the first let go when its pass ended
            #expect(try direct.query(TestDatabase.advisoryLocksHere)[0]["n"].int() == 0)
        }
    }

    @Test func refund_revokesWithApplesDateAndReason_andActiveOnesOnlyMoveLastChecked() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.rig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            try await Self.insert(rig.db, id: "e-refunded", transaction: "1000000001")
            try await Self.insert(rig.db, id: "e-fine", transaction: "1000000002")
            try await Self.insert(rig.db, id: "e-sandbox", transaction: "2000000001", environment: "Sandbox")
            let revocation: Int64 = 1_770_000_123_456
            rig.production.answer("1000000001", .signed(try pki.signedTransaction(
                ApplePKI.payload(transactionId: "1000000001", original: "1000000001", revocationDate: revocation, revocationReason: 1))))
            rig.production.answer("1000000002", .signed(try pki.signedTransaction(ApplePKI.payload(transactionId: "1000000002", original: "1000000002"))))
            rig.sandbox.answer("2000000001", .signed(try pki.signedTransaction(
                ApplePKI.payload(transactionId: "2000000001", original: "2000000001", environment: "Sandbox"))))

            let summary = try await rig.rechecker.runOnce()
            #expect(summary.checked == 3 && summary.revoked == 1 && summary.failed == 0)
            let refunded = try await Self.row(rig.db, "e-refunded")
            #expect(refunded.status == .revoked)
            #expect(refunded.revokedAtMillis == revocation)
            #expect(refunded.reason == "1")
            let fine = try await Self.row(rig.db, "e-fine")
            #expect(fine.status == .active && fine.checked && fine.revokedAtMillis == nil)
            #expect(rig.sandbox.requests == ["2000000001"])
            #expect(Set(rig.production.requests) == ["1000000001", "1000000002"])
            #expect(rig.production.refused == 0)  // the client's JWT verified every time
            #expect(rig.metrics.value("entitlements_revoked_total") == 1)
            // Checked rows are not due again within the interval.
            #expect(try await rig.rechecker.runOnce().checked == 0)
        }
    }

    @Test(arguments: ["untrusted_chain", "bundle_id_mismatch", "missing_leaf_oid", "bad_signature", "untrusted_environment"])
    func badEvidence_neverRevokes(reason: String) async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.rig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            try await Self.insert(rig.db, id: "e1", transaction: "3000000001")
            let revoked = ApplePKI.payload(transactionId: "3000000001", original: "3000000001", revocationDate: 1_770_000_000_000, revocationReason: 0)
            let jws: String
            switch reason {
            case "untrusted_chain": jws = try pki.signedTransaction(revoked, chain: pki.untrustedChain, keyPEM: pki.untrustedLeafKeyPEM)
            case "bundle_id_mismatch":
                jws = try pki.signedTransaction(ApplePKI.payload(transactionId: "3000000001", original: "3000000001", bundle: "com.other.app",
                                                                 revocationDate: 1_770_000_000_000))
            case "missing_leaf_oid": jws = try pki.signedTransaction(revoked, chain: pki.noOIDChain, keyPEM: pki.noOIDLeafKeyPEM)
            case "bad_signature":
                // Tampered payload: a genuine signature over a different payload.
                let genuine = try pki.signedTransaction(ApplePKI.payload(transactionId: "3000000001", original: "3000000001"))
                let parts = genuine.split(separator: ".")
                let forged = Base64URL.encode(try JSONSerialization.data(withJSONObject: revoked))
                jws = "\(parts[0]).\(forged).\(parts[2])"
            default:
                jws = try pki.signedTransaction(ApplePKI.payload(transactionId: "3000000001", original: "3000000001", environment: "Xcode",
                                                                 revocationDate: 1_770_000_000_000))
            }
            rig.production.answer("3000000001", .signed(jws))
            let summary = try await rig.rechecker.runOnce()
            #expect(summary.failed == 1 && summary.revoked == 0)
            let row = try await Self.row(rig.db, "e1")
            #expect(row.status == .active && row.revokedAtMillis == nil && !row.checked)
            #expect(rig.metrics.value("entitlement_checks_total", labels: ["result": reason]) == 1)
        }
    }

    @Test func notFoundAndRateLimit_changeNothingAndAreCounted() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.rig(conninfo)
            defer { rig.stop() }
            try await Self.insert(rig.db, id: "e-a", transaction: "4000000001")
            try await Self.insert(rig.db, id: "e-b", transaction: "4000000002")
            rig.production.answer("4000000001", .notFound)
            let retryAt: Int64 = Int64(Date().timeIntervalSince1970 * 1000) + 90_000
            rig.production.answer("4000000002", .rateLimited(retryAtMillis: retryAt))
            let summary = try await rig.rechecker.runOnce()
            #expect(rig.metrics.value("entitlement_checks_total", labels: ["result": "not_found"]) == 1)
            #expect(rig.metrics.value("entitlement_checks_total", labels: ["result": "rate_limited"]) == 1)
            #expect(summary.rateLimitedUntil.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } == retryAt)
            for id in ["e-a", "e-b"] {
                let row = try await Self.row(rig.db, id)
                #expect(row.status == .active && !row.checked)
            }
        }
    }

    /// Apple's 400 (4000006) for a transaction id that is not valid names the row, not an outage: counted and logged as
    /// such (before: "App Store server error", `server_error`), the row left as it was and tried again after its backoff.
    @Test func invalidTransactionId_isTheRowsFault_notAServerError() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let sink = MemorySink()
            let rig = try Self.rig(conninfo, sink: sink)
            defer { rig.stop() }
            try await Self.insert(rig.db, id: "e-bad-id", transaction: "not-a-transaction-id")
            rig.production.answer("not-a-transaction-id", .invalidTransactionId)
            _ = try await rig.rechecker.runOnce()
            #expect(rig.metrics.value("entitlement_checks_total", labels: ["result": "invalid_transaction_id"]) == 1)
            #expect(rig.metrics.value("entitlement_checks_total", labels: ["result": "server_error"]) == 0)
            let row = try await Self.row(rig.db, "e-bad-id")
            #expect(row.status == .active && !row.checked)
            let line = sink.entries.first { $0.metadata["entitlement.id"] == "e-bad-id" }
            #expect(line?.message == "App Store refused the row's transaction id as not valid; entitlement unchanged")
            #expect(line?.metadata["appstore.error_code"] == "4000006")
        }
    }

    @Test func reversedRefund_restoresOnlyOnVerifiedEvidence_andOthersRevocationsAreLeftAlone() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let rig = try Self.rig(conninfo)
            defer { rig.stop() }
            let pki = ApplePKI.shared
            try await Self.insert(rig.db, id: "ours-verified", transaction: "5000000001", status: "REVOKED", revokedAt: "2026-01-01 00:00:00+00")
            try await Self.insert(rig.db, id: "ours-untrusted", transaction: "5000000002", status: "REVOKED", revokedAt: "2026-01-01 00:00:00+00")
            try await Self.insert(rig.db, id: "by-support", transaction: "5000000003", status: "REVOKED")
            rig.production.answer("5000000001", .signed(try pki.signedTransaction(ApplePKI.payload(transactionId: "5000000001", original: "5000000001"))))
            rig.production.answer("5000000002", .signed(try pki.signedTransaction(
                ApplePKI.payload(transactionId: "5000000002", original: "5000000002"), chain: pki.untrustedChain, keyPEM: pki.untrustedLeafKeyPEM)))
            rig.production.answer("5000000003", .signed(try pki.signedTransaction(ApplePKI.payload(transactionId: "5000000003", original: "5000000003"))))
            let summary = try await rig.rechecker.runOnce()
            #expect(summary.restored == 1)
            let restored = try await Self.row(rig.db, "ours-verified")
            #expect(restored.status == .active && restored.revokedAtMillis == nil && restored.reason == nil)
            let untrusted = try await Self.row(rig.db, "ours-untrusted")
            #expect(untrusted.status == .revoked && untrusted.revokedAtMillis != nil)
            let support = try await Self.row(rig.db, "by-support")
            #expect(support.status == .revoked && !support.checked)
            #expect(!rig.production.requests.contains("5000000003"))
            #expect(rig.metrics.value("entitlements_restored_total") == 1)
        }
    }

    @Test func clientJWT_hasTheRightHeaderAndClaimsAndVerifies() async throws {
        let pki = ApplePKI.shared
        let configuration = AppStoreConfiguration(issuerId: "issuer-1", keyId: "KEY123", bundleId: Self.bundle,
                                                  privateKey: try PrivateKey(pem: pki.apiKeyPEM), roots: [])
        let client = AppStoreClient(configuration: configuration, http: try HTTPClient())
        let token = try client.makeToken()
        let parts = token.split(separator: ".")
        let header = try #require(try JSONSerialization.jsonObject(with: Base64URL.decode(parts[0])!) as? [String: Any])
        let claims = try #require(try JSONSerialization.jsonObject(with: Base64URL.decode(parts[1])!) as? [String: Any])
        #expect(header["alg"] as? String == "ES256" && header["kid"] as? String == "KEY123" && header["typ"] as? String == "JWT")
        #expect(claims["iss"] as? String == "issuer-1" && claims["aud"] as? String == "appstoreconnect-v1" && claims["bid"] as? String == Self.bundle)
        let iat = try #require(claims["iat"] as? Int), exp = try #require(claims["exp"] as? Int)
        #expect(exp > iat && exp - iat <= 3600)
        #expect(Base64URL.decode(parts[2])?.count == 64)  // raw r‖s, not DER
        let fake = try FakeAppStore(apiPublicKeyPEM: pki.apiPublicKeyPEM, keyId: "KEY123", issuerId: "issuer-1", bundleId: Self.bundle)
        defer { fake.stop() }
        #expect(fake.verifyJWT(token))
        let other = try FakeAppStore(apiPublicKeyPEM: TLSFixtures.shared.rsaKeyPair().publicPEM, keyId: "KEY123", issuerId: "issuer-1", bundleId: Self.bundle)
        defer { other.stop() }
        #expect(!other.verifyJWT(token))
    }
}
