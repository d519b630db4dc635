import AppStore
import Crypto
import Foundation
import Testing
import TestSupport

/// Each refusal of the verifier on its own (no network, no database).
@Suite("Signed transaction verification", .blockingFixtures)
struct SignedTransactionVerifierTests {
    let pki = ApplePKI.shared
    var verifier: SignedTransactionVerifier {
        SignedTransactionVerifier(roots: [try! Certificate(pemOrDER: Array(pki.rootPEM.utf8))])
    }
    let expected = SignedTransactionVerifier.Expectation(bundleId: "jp.example.medication", productId: "premium.monthly",
                                                         originalTransactionId: "9", environment: "Production")

    func refusal(_ jws: String, _ expectation: SignedTransactionVerifier.Expectation? = nil) -> SignedTransactionVerifier.Refusal? {
        do {
            _ = try verifier.verify(jws, expecting: expectation ?? expected)
            return nil
        } catch {
            return error
        }
    }

    @Test func genuineTransaction_verifies() throws {
        let jws = try pki.signedTransaction(ApplePKI.payload(transactionId: "10", original: "9", revocationDate: 1_770_000_000_123, revocationReason: 1))
        let verified = try verifier.verify(jws, expecting: expected)
        #expect(verified.revocationDate == Date(timeIntervalSince1970: 1_770_000_000.123))
        #expect(verified.revocationReason == 1)
    }

    @Test func eachCheck_refusesWithItsOwnReason() throws {
        let good = ApplePKI.payload(transactionId: "10", original: "9")
        #expect(refusal("not.a.jws") == .malformedJWS)
        #expect(refusal(try JWT.sign(header: ["alg": "ES384", "x5c": pki.trustedChain], claims: good, key: PrivateKey(pem: pki.leafKeyPEM)))
                == .unsupportedAlgorithm)
        #expect(refusal(try pki.signedTransaction(good, chain: Array(pki.trustedChain.prefix(2)))) == .certificateCount)
        #expect(refusal(try pki.signedTransaction(good, chain: pki.untrustedChain, keyPEM: pki.untrustedLeafKeyPEM)) == .untrustedChain)
        #expect(refusal(try pki.signedTransaction(good, chain: pki.noOIDChain, keyPEM: pki.noOIDLeafKeyPEM)) == .missingLeafOID)
        #expect(refusal(try pki.signedTransaction(good, chain: pki.noIntermediateOIDChain, keyPEM: pki.noIntermediateOIDLeafKeyPEM))
                == .missingIntermediateOID)
        // Signed by a key that is not the leaf's.
        #expect(refusal(try pki.signedTransaction(good, keyPEM: pki.untrustedLeafKeyPEM)) == .badSignature)
        // Validity is checked at the payload's signedDate: 2100 is after the certificates expire.
        var late = good
        late["signedDate"] = Int64(4_102_444_800_000)
        #expect(refusal(try pki.signedTransaction(late)) == .untrustedChain)
        #expect(refusal(try pki.signedTransaction(ApplePKI.payload(transactionId: "10", original: "9", bundle: "com.other"))) == .bundleMismatch)
        #expect(refusal(try pki.signedTransaction(ApplePKI.payload(transactionId: "10", original: "9", product: "other.product"))) == .productMismatch)
        #expect(refusal(try pki.signedTransaction(ApplePKI.payload(transactionId: "10", original: "8"))) == .transactionMismatch)
        #expect(refusal(try pki.signedTransaction(ApplePKI.payload(transactionId: "10", original: "9", environment: "Sandbox"))) == .environmentMismatch)
        #expect(refusal(try pki.signedTransaction(ApplePKI.payload(transactionId: "10", original: "9", environment: "LocalTesting")))
                == .untrustedEnvironment)
    }

    /// Issue 45: `signedDate` is read before the signature is checked; a value no `time_t` holds used to trap the
    /// process in `time_t(...)`. It is refused as a malformed payload, whoever signed it.
    @Test func signedDateOutOfRange_isRefusedNotATrap() throws {
        for value: Any in [1e300, 9.3e18, -1_000, Double.greatestFiniteMagnitude] {
            var payload = ApplePKI.payload(transactionId: "10", original: "9")
            payload["signedDate"] = value
            #expect(refusal(try pki.signedTransaction(payload)) == .malformedPayload, "signedDate \(value)")
            #expect(refusal(try pki.signedTransaction(payload, chain: pki.untrustedChain, keyPEM: pki.untrustedLeafKeyPEM)) == .malformedPayload)
        }
        let leaf = try Certificate(pemOrDER: Array(pki.rootPEM.utf8))
        #expect(throws: CryptoError.self) {
            try Certificate.verifyChain(leaf: leaf, intermediates: [], roots: [leaf], at: Date(timeIntervalSince1970: 1e300))
        }
    }

    /// Issue 54: `revocationDate` is range-checked like `signedDate` before its conversion (a value no `time_t` holds
    /// trapped where the revocation was stored); one that is not a number is refused too rather than read as "not
    /// revoked". A genuine one and an explicit null still verify.
    @Test func revocationDateOutOfRangeOrNotANumber_isRefused() throws {
        for value: Any in [1e300, 9.3e18, -1_000, "2026-01-01"] {
            var payload = ApplePKI.payload(transactionId: "10", original: "9")
            payload["revocationDate"] = value
            #expect(refusal(try pki.signedTransaction(payload)) == .malformedPayload, "revocationDate \(value)")
        }
        var payload = ApplePKI.payload(transactionId: "10", original: "9")
        payload["revocationDate"] = NSNull()
        #expect(try verifier.verify(try pki.signedTransaction(payload), expecting: expected).revocationDate == nil)
    }
}
