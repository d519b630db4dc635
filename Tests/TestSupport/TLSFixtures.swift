import Foundation

/// Throwaway PKI made at test time with the openssl CLI: a CA, a server certificate for
/// 127.0.0.1/localhost signed by it, and RSA/EC key pairs. Nothing is committed.
public struct TLSFixtures: Sendable {
    public let directory: String
    /// CA certificate (PEM file) to hand to clients as `TLS_CA_FILE`.
    public let caFile: String
    public let serverCertificatePEM: String
    public let serverKeyPEM: String

    /// Generated once per test process.
    public static let shared: TLSFixtures = {
        do { return try TLSFixtures() } catch { fatalError("cannot generate TLS fixtures: \(error)") }
    }()

    init() throws {
        directory = NSTemporaryDirectory() + "mw-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let dir = directory
        try Self.openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(dir)/ca.key", "-out", "\(dir)/ca.pem",
                          "-days", "2", "-subj", "/CN=medication-worker test CA"])
        try Self.openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(dir)/server.key", "-out", "\(dir)/server.csr",
                          "-subj", "/CN=localhost"])
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(toFile: "\(dir)/server.ext", atomically: true, encoding: .utf8)
        try Self.openssl(["x509", "-req", "-in", "\(dir)/server.csr", "-CA", "\(dir)/ca.pem", "-CAkey", "\(dir)/ca.key",
                          "-CAcreateserial", "-out", "\(dir)/server.pem", "-days", "2", "-extfile", "\(dir)/server.ext"])
        caFile = "\(dir)/ca.pem"
        serverCertificatePEM = try String(contentsOfFile: "\(dir)/server.pem", encoding: .utf8)
        serverKeyPEM = try String(contentsOfFile: "\(dir)/server.key", encoding: .utf8)
    }

    /// A fresh RSA key pair: (private PKCS#8 PEM, public PEM).
    public func rsaKeyPair(name: String = UUID().uuidString) throws -> (privatePEM: String, publicPEM: String) {
        let key = "\(directory)/\(name).key"
        try Self.openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key])
        try Self.openssl(["pkey", "-in", key, "-pubout", "-out", "\(key).pub"])
        return (try String(contentsOfFile: key, encoding: .utf8), try String(contentsOfFile: "\(key).pub", encoding: .utf8))
    }

    /// Writes a Google service-account JSON whose token_uri is `tokenURI`; returns its path.
    public func serviceAccountFile(privateKeyPEM: String, tokenURI: String, projectId: String = "test-project",
                                   clientEmail: String = "worker@test-project.iam.gserviceaccount.com") throws -> String {
        let object: [String: Any] = [
            "type": "service_account", "project_id": projectId, "private_key_id": "kid-1",
            "private_key": privateKeyPEM, "client_email": clientEmail, "token_uri": tokenURI,
        ]
        let path = "\(directory)/sa-\(UUID().uuidString).json"
        try JSONSerialization.data(withJSONObject: object, options: [.withoutEscapingSlashes]).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Runs the openssl CLI; throws with its stderr on failure. Its stderr goes to a temp file, not a pipe: a process
    /// started meanwhile by another test could inherit the pipe's write end and keep its end-of-file from ever coming.
    /// Blocks until openssl exits (callers are synchronous: run them under `.blockingFixtures`).
    public static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let errPath = try TestBinaries.temporaryFile("", suffix: ".err")
        defer { try? FileManager.default.removeItem(atPath: errPath) }
        process.standardError = FileHandle(forWritingAtPath: errPath)
        process.standardOutput = FileHandle.nullDevice
        let status = try process.start().waitBlocking()
        guard status == 0 else {
            let message = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
            throw TestSupportError("openssl \(arguments.first ?? "") failed: \(message)")
        }
    }
}
