import Crypto
import Foundation
import TestSupport

/// A throwaway Apple-like PKI made with the openssl CLI: root → intermediate (OID
/// 1.2.840.113635.100.6.2.1) → leaf (OID 1.2.840.113635.100.6.11.1), EC P-256; plus an untrusted
/// look-alike chain, a leaf without the OID, and the App Store Connect API key (.p8).
struct ApplePKI: Sendable {
    let directory: String
    let rootPEM: String
    /// x5c (standard base64 DER) of the trusted chain, the look-alike chain, and one whose leaf lacks the OID.
    let trustedChain: [String]
    let untrustedChain: [String]
    let noOIDChain: [String]
    /// Trusted root → an intermediate WITHOUT Apple's OID → a leaf with its OID.
    let noIntermediateOIDChain: [String]
    let noIntermediateOIDLeafKeyPEM: String
    let leafKeyPEM: String
    let untrustedLeafKeyPEM: String
    let noOIDLeafKeyPEM: String
    let apiKeyPEM: String
    let apiPublicKeyPEM: String

    static let shared: ApplePKI = {
        do { return try ApplePKI() } catch { fatalError("cannot make the Apple-like PKI: \(error)") }
    }()

    init() throws {
        directory = NSTemporaryDirectory() + "mw-apple-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let d = directory
        func write(_ name: String, _ text: String) throws { try text.write(toFile: "\(d)/\(name)", atomically: true, encoding: .utf8) }
        try write("int.ext", "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n1.2.840.113635.100.6.2.1=ASN1:NULL\n")
        try write("leaf.ext", "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n1.2.840.113635.100.6.11.1=ASN1:NULL\n")
        try write("leaf-nooid.ext", "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n")
        func key(_ name: String) throws {
            try TLSFixtures.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "\(d)/\(name).key"])
        }
        func chain(_ prefix: String, leafExt: String) throws -> [String] {
            for name in ["root", "int", "leaf"] { try key("\(prefix)-\(name)") }
            try TLSFixtures.openssl(["req", "-x509", "-new", "-key", "\(d)/\(prefix)-root.key", "-subj", "/CN=\(prefix) Root CA - G3",
                                     "-days", "30", "-out", "\(d)/\(prefix)-root.pem"])
            for (name, issuer, ext) in [("int", "root", "int.ext"), ("leaf", "int", leafExt)] {
                try TLSFixtures.openssl(["req", "-new", "-key", "\(d)/\(prefix)-\(name).key", "-subj", "/CN=\(prefix) \(name)",
                                         "-out", "\(d)/\(prefix)-\(name).csr"])
                try TLSFixtures.openssl(["x509", "-req", "-in", "\(d)/\(prefix)-\(name).csr", "-CA", "\(d)/\(prefix)-\(issuer).pem",
                                         "-CAkey", "\(d)/\(prefix)-\(issuer).key", "-CAcreateserial", "-days", "30",
                                         "-extfile", "\(d)/\(ext)", "-out", "\(d)/\(prefix)-\(name).pem"])
            }
            return try ["leaf", "int", "root"].map { name in
                try TLSFixtures.openssl(["x509", "-in", "\(d)/\(prefix)-\(name).pem", "-outform", "DER", "-out", "\(d)/\(prefix)-\(name).der"])
                return try Data(contentsOf: URL(fileURLWithPath: "\(d)/\(prefix)-\(name).der")).base64EncodedString()
            }
        }
        trustedChain = try chain("trusted", leafExt: "leaf.ext")
        untrustedChain = try chain("evil", leafExt: "leaf.ext")
        let noOID = try chain("nooid", leafExt: "leaf-nooid.ext")
        // The no-OID leaf must chain to the trusted root to test the OID check alone: re-sign it under the trusted intermediate.
        try TLSFixtures.openssl(["x509", "-req", "-in", "\(d)/nooid-leaf.csr", "-CA", "\(d)/trusted-int.pem", "-CAkey", "\(d)/trusted-int.key",
                                 "-CAcreateserial", "-days", "30", "-extfile", "\(d)/leaf-nooid.ext", "-out", "\(d)/nooid-leaf2.pem"])
        try TLSFixtures.openssl(["x509", "-in", "\(d)/nooid-leaf2.pem", "-outform", "DER", "-out", "\(d)/nooid-leaf2.der"])
        noOIDChain = [try Data(contentsOf: URL(fileURLWithPath: "\(d)/nooid-leaf2.der")).base64EncodedString(), trustedChain[1], trustedChain[2]]
        _ = noOID
        try write("plainint.ext", "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
        for name in ["plainint", "plainleaf"] { try key(name) }
        try TLSFixtures.openssl(["req", "-new", "-key", "\(d)/plainint.key", "-subj", "/CN=plain intermediate", "-out", "\(d)/plainint.csr"])
        try TLSFixtures.openssl(["x509", "-req", "-in", "\(d)/plainint.csr", "-CA", "\(d)/trusted-root.pem", "-CAkey", "\(d)/trusted-root.key",
                                 "-CAcreateserial", "-days", "30", "-extfile", "\(d)/plainint.ext", "-out", "\(d)/plainint.pem"])
        try TLSFixtures.openssl(["req", "-new", "-key", "\(d)/plainleaf.key", "-subj", "/CN=plain leaf", "-out", "\(d)/plainleaf.csr"])
        try TLSFixtures.openssl(["x509", "-req", "-in", "\(d)/plainleaf.csr", "-CA", "\(d)/plainint.pem", "-CAkey", "\(d)/plainint.key",
                                 "-CAcreateserial", "-days", "30", "-extfile", "\(d)/leaf.ext", "-out", "\(d)/plainleaf.pem"])
        noIntermediateOIDChain = try ["plainleaf", "plainint"].map { name in
            try TLSFixtures.openssl(["x509", "-in", "\(d)/\(name).pem", "-outform", "DER", "-out", "\(d)/\(name).der"])
            return try Data(contentsOf: URL(fileURLWithPath: "\(d)/\(name).der")).base64EncodedString()
        } + [trustedChain[2]]
        noIntermediateOIDLeafKeyPEM = try String(contentsOfFile: "\(d)/plainleaf.key", encoding: .utf8)
        rootPEM = try String(contentsOfFile: "\(d)/trusted-root.pem", encoding: .utf8)
        leafKeyPEM = try String(contentsOfFile: "\(d)/trusted-leaf.key", encoding: .utf8)
        untrustedLeafKeyPEM = try String(contentsOfFile: "\(d)/evil-leaf.key", encoding: .utf8)
        noOIDLeafKeyPEM = try String(contentsOfFile: "\(d)/nooid-leaf.key", encoding: .utf8)
        try key("api")
        try TLSFixtures.openssl(["pkey", "-in", "\(d)/api.key", "-pubout", "-out", "\(d)/api.pub"])
        apiKeyPEM = try String(contentsOfFile: "\(d)/api.key", encoding: .utf8)
        apiPublicKeyPEM = try String(contentsOfFile: "\(d)/api.pub", encoding: .utf8)
    }

    /// A signedTransactionInfo JWS over `payload`, with the given chain and signing key.
    func signedTransaction(_ payload: [String: Any], chain: [String]? = nil, keyPEM: String? = nil) throws -> String {
        try JWT.sign(header: ["alg": "ES256", "x5c": chain ?? trustedChain], claims: payload,
                     key: try PrivateKey(pem: keyPEM ?? leafKeyPEM))
    }

    /// A transaction payload as Apple signs it (dates in milliseconds).
    static func payload(transactionId: String, original: String, product: String = "premium.monthly",
                        bundle: String = "jp.example.medication", environment: String = "Production",
                        revocationDate: Int64? = nil, revocationReason: Int? = nil, revocationType: String? = nil,
                        revocationPercentage: Int? = nil, ownership: String = "PURCHASED") -> [String: Any] {
        var payload: [String: Any] = [
            "transactionId": transactionId, "originalTransactionId": original, "bundleId": bundle, "productId": product,
            "purchaseDate": 1_767_225_600_000, "type": "Auto-Renewable Subscription", "environment": environment,
            "signedDate": Int64(Date().timeIntervalSince1970 * 1000), "inAppOwnershipType": ownership,
        ]
        if let revocationDate { payload["revocationDate"] = revocationDate }
        if let revocationReason { payload["revocationReason"] = revocationReason }
        // App Store Server API 1.19: the kind of revocation, and a refund's share in milliunits (40% = 40000).
        if let revocationType { payload["revocationType"] = revocationType }
        if let revocationPercentage { payload["revocationPercentage"] = revocationPercentage }
        return payload
    }
}

extension ApplePKI {
    /// A notification's `signedPayload` (ResponseBodyV2DecodedPayload) around a signed transaction.
    func signedNotification(type: String, transaction: String, bundle: String = "jp.example.medication", environment: String = "Production",
                            chain: [String]? = nil, keyPEM: String? = nil, signedDate: Int64? = nil) throws -> String {
        let payload: [String: Any] = [
            "notificationType": type, "notificationUUID": UUID().uuidString.lowercased(), "version": "2.0",
            "signedDate": signedDate ?? Int64(Date().timeIntervalSince1970 * 1000),
            "data": ["appAppleId": 1_234_567_890, "bundleId": bundle, "bundleVersion": "1", "environment": environment,
                     "signedTransactionInfo": transaction, "status": 1] as [String: Any],
        ]
        return try JWT.sign(header: ["alg": "ES256", "x5c": chain ?? trustedChain], claims: payload, key: try PrivateKey(pem: keyPEM ?? leafKeyPEM))
    }
}

extension JWT {
    /// The tests' JWTs carry free-form JSON (whole App Store payloads, certificate chains): written by Foundation's
    /// serialiser here, signed by the daemon's own code.
    static func sign(header: [String: Any], claims: [String: Any], key: PrivateKey) throws -> String {
        let options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        return try sign(headerJSON: JSONSerialization.data(withJSONObject: header, options: options),
                        claimsJSON: JSONSerialization.data(withJSONObject: claims, options: options), key: key)
    }
}
