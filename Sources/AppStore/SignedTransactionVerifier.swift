import Crypto
import FoundationEssentials
import JSON

/// A transaction Apple signed, after every check passed.
public struct VerifiedTransaction: Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var bundleId: String
    public var productId: String
    public var environment: String
    /// Apple's `revocationDate` (refund or revocation), nil when the purchase stands.
    public var revocationDate: Date?
    /// Apple's `revocationReason` integer.
    public var revocationReason: Int?
    /// Apple's `revocationType` and `revocationPercentage` (App Store Server API 1.19), when present.
    public var revocationKind: RevocationKind = RevocationKind()
    public var signedDate: Date
}

/// Apple's 2025 description of a revocation (App Store Server API 1.19): `revocationType` (`REFUND_FULL`,
/// `REFUND_PRORATED`, `FAMILY_REVOKE`) and, for a refund, `revocationPercentage` in milliunits (40% = 40000).
/// docs/operations.md ("Refunds and Family Sharing") says what each does to an entitlement: every one revokes it.
public struct RevocationKind: Sendable, Equatable {
    public var type: String?
    public var percentage: Int?
    public init(type: String? = nil, percentage: Int? = nil) {
        self.type = type
        self.percentage = percentage
    }
}

/// Verifies `signedTransactionInfo` (a compact JWS) before anything trusts it: ES256, an x5c
/// chain of exactly three certificates to a configured Apple root with Apple's marker OIDs,
/// validity at the payload's `signedDate`, the signature by the leaf, and the payload's
/// identity against what the entitlement row expects.
public struct SignedTransactionVerifier: Sendable {
    /// Apple's marker on the leaf ("Apple App Store receipt signing").
    public static let leafOID = "1.2.840.113635.100.6.11.1"
    /// Apple's marker on the intermediate (Apple Worldwide Developer Relations CA).
    public static let intermediateOID = "1.2.840.113635.100.6.2.1"
    /// Environments whose data Apple does not sign: never trusted.
    public static let untrustedEnvironments: Set<String> = ["Xcode", "LocalTesting"]

    /// Why evidence was refused; `rawValue` is the metric label and log field.
    public enum Refusal: String, Error, Sendable, CaseIterable {
        case malformedJWS = "malformed_jws"
        case unsupportedAlgorithm = "unsupported_alg"
        case certificateCount = "x5c_not_three_certificates"
        case badCertificate = "bad_certificate"
        case untrustedChain = "untrusted_chain"
        case missingLeafOID = "missing_leaf_oid"
        case missingIntermediateOID = "missing_intermediate_oid"
        case badSignature = "bad_signature"
        case malformedPayload = "malformed_payload"
        case bundleMismatch = "bundle_id_mismatch"
        case productMismatch = "product_id_mismatch"
        case transactionMismatch = "original_transaction_id_mismatch"
        case environmentMismatch = "environment_mismatch"
        case untrustedEnvironment = "untrusted_environment"
        /// A notification whose decoded payload lacks its type, data or signed transaction.
        case malformedNotification = "malformed_notification"
        /// A notification of another type than the query asked for.
        case notificationTypeMismatch = "notification_type_mismatch"
    }

    /// What the row expects the transaction to be.
    public struct Expectation: Sendable {
        public var bundleId: String
        public var productId: String
        public var originalTransactionId: String
        /// `Production` or `Sandbox`.
        public var environment: String

        public init(bundleId: String, productId: String, originalTransactionId: String, environment: String) {
            self.bundleId = bundleId
            self.productId = productId
            self.originalTransactionId = originalTransactionId
            self.environment = environment
        }
    }

    let roots: [Certificate]

    public init(roots: [Certificate]) { self.roots = roots }

    /// Verifies `jws`; throws the first `Refusal`.
    public func verify(_ jws: String, expecting expectation: Expectation) throws(Refusal) -> VerifiedTransaction {
        let (payload, signedDate) = try verifiedPayload(jws)
        guard let transactionId = Self.string(payload["transactionId"]),
              let originalTransactionId = Self.string(payload["originalTransactionId"]),
              let bundleId = payload["bundleId"]?.stringValue, let productId = payload["productId"]?.stringValue,
              let environment = payload["environment"]?.stringValue else {
            throw .malformedPayload
        }
        guard !Self.untrustedEnvironments.contains(environment) else { throw .untrustedEnvironment }
        guard bundleId == expectation.bundleId else { throw .bundleMismatch }
        guard productId == expectation.productId else { throw .productMismatch }
        guard originalTransactionId == expectation.originalTransactionId else { throw .transactionMismatch }
        guard environment == expectation.environment else { throw .environmentMismatch }
        // Range-checked like `signedDate` before anything converts it: a value no clock can hold would trap in `time_t(...)`
        // where the revocation is stored or logged.
        var revocation: Date?
        if let value = payload["revocationDate"], value != .null {
            guard let millis = value.numberValue, Self.signedDateRange.contains(millis) else { throw .malformedPayload }
            revocation = Date(timeIntervalSince1970: millis / 1000)
        }
        // Recorded as Apple sent them, never a reason to refuse the transaction: a type Apple adds later is kept as text.
        let kind = RevocationKind(type: payload["revocationType"]?.stringValue.map { String($0.prefix(40)) },
                                  percentage: payload["revocationPercentage"]?.intValue.flatMap { (0...100_000).contains($0) ? $0 : nil })
        return VerifiedTransaction(transactionId: transactionId, originalTransactionId: originalTransactionId, bundleId: bundleId,
                                   productId: productId, environment: environment, revocationDate: revocation,
                                   revocationReason: payload["revocationReason"]?.intValue, revocationKind: kind, signedDate: signedDate)
    }

    /// The `signedDate`s (UNIX milliseconds) a payload may carry: 1970 to the end of year 9999.
    static let signedDateRange: ClosedRange<Double> = 0...253_402_300_799_999

    /// Checks a compact JWS Apple signed (ES256, x5c chain of three to a configured root with Apple's OIDs, valid
    /// at the payload's `signedDate`, signature by the leaf) and returns its payload; used for transactions and notifications.
    func verifiedPayload(_ jws: String) throws(Refusal) -> (payload: JSONValue, signedDate: Date) {
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Base64URL.decode(parts[0]), let payloadData = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]),
              let header = JSONValue.parse(bytes: headerData), header.objectValue != nil else {
            throw .malformedJWS
        }
        guard header["alg"]?.stringValue == "ES256" else { throw .unsupportedAlgorithm }
        guard let x5c = header["x5c"]?.arrayValue?.compactMap(\.stringValue), x5c.count == 3,
              header["x5c"]?.arrayValue?.count == 3 else { throw .certificateCount }
        var chain: [Certificate] = []
        for encoded in x5c {
            guard let der = Data(base64Encoded: encoded), let certificate = try? Certificate(der: Array(der)) else {
                throw .badCertificate
            }
            chain.append(certificate)
        }
        // `signedDate` is read before the signature is checked (the chain is judged at that instant): an attacker's
        // value, range-checked before anything converts it (a huge one trapped in `time_t(...)`).
        guard let payload = JSONValue.parse(bytes: payloadData), payload.objectValue != nil,
              let signedMillis = payload["signedDate"]?.numberValue, Self.signedDateRange.contains(signedMillis) else {
            throw .malformedPayload
        }
        let signedDate = Date(timeIntervalSince1970: signedMillis / 1000)
        do {
            try Certificate.verifyChain(leaf: chain[0], intermediates: [chain[1]], roots: roots, at: signedDate)
        } catch {
            throw .untrustedChain
        }
        guard chain[0].hasExtension(oid: Self.leafOID) else { throw .missingLeafOID }
        guard chain[1].hasExtension(oid: Self.intermediateOID) else { throw .missingIntermediateOID }
        guard let key = try? chain[0].publicKey(), key.isEC, signature.count == 64,
              let der = try? ECDSASignature.rawToDer(Array(signature)),
              key.verifySHA256(signature: der, data: Array("\(parts[0]).\(parts[1])".utf8)) else {
            throw .badSignature
        }
        return (payload, signedDate)
    }

    /// The payload of a JWS read WITHOUT any check: only to find which row a notification is about, before
    /// `verify(_:expecting:)` checks it against that row.
    static func unverifiedPayload(_ jws: String) -> JSONValue? {
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = Base64URL.decode(parts[1]), let payload = JSONValue.parse(bytes: data),
              payload.objectValue != nil else { return nil }
        return payload
    }

    /// Apple sends ids as strings; accept numbers too.
    static func string(_ value: JSONValue?) -> String? {
        if let text = value?.stringValue { return text }
        if let number = value?.intValue { return String(number) }
        return nil
    }
}
