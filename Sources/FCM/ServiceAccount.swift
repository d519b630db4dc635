import Crypto
import FoundationEssentials
import JSON
import TextSupport

/// The fields of a Google service-account JSON key file that FCM needs.
public struct ServiceAccount: Sendable {
    public var projectId: String
    public var clientEmail: String
    /// The OAuth token endpoint (the JSON's `token_uri`).
    public var tokenURI: String
    /// The RS256 signing key (never printed).
    public let privateKey: PrivateKey
    public var privateKeyId: String?

    /// The most of a service-account file read into memory: Google's JSON key is about 2.3 KB.
    public static let maxFileBytes = 64 * 1024
    /// What a service-account file weighs, for the message that refuses a larger one.
    public static let typicalFileSize = "a Google service account key is about 2.3 KB"

    /// Reads and validates the file (at most `maxFileBytes`); the error names the file and the missing or bad field.
    public static func load(path: String) throws(FCMError) -> ServiceAccount {
        switch BoundedFile.read(path, limit: maxFileBytes) {
        case .success(let bytes): return try parse(Data(bytes), source: path)
        case .failure(let failure): throw FCMError(.invalidServiceAccount, failure.problem(path, typical: typicalFileSize))
        }
    }

    /// Parses service-account JSON; `source` names it in errors. Throws the first problem `check` finds.
    public static func parse(_ data: Data, source: String) throws(FCMError) -> ServiceAccount {
        switch check(data, source: source) {
        case .success(let account): return account
        case .failure(let problems): throw problems.errors[0]
        }
    }

    /// Every problem of a service-account file, each an `FCMError` naming the field (never its value).
    public struct Problems: Error, Sendable {
        /// At least one.
        public var errors: [FCMError]
    }

    /// What is wrong with a `token_uri`, or nil. The signed assertion (good for an hour) and the access token it buys
    /// travel to it, so it is https, as FCM_BASE_URL is; plain http only to a loopback address (an emulator).
    static func tokenURIProblem(_ text: String) -> String? {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
              scheme == "https" || scheme == "http" else { return "is not an https URL" }
        if scheme == "http" && !isLoopback(host) {
            return "must be an https URL (plain http only to a loopback address), got http://\(host.prefix(80))"
        }
        return nil
    }

    /// `localhost`, 127.0.0.0/8 or ::1.
    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" || bare == "::1" { return true }
        let octets = bare.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    /// Parses service-account JSON and checks every field FCM needs: `type`, `project_id`, `client_email`,
    /// `token_uri` (https, or http to a loopback address) and `private_key` (a PEM RSA private key); returns every problem found.
    public static func check(_ data: Data, source: String) -> Result<ServiceAccount, Problems> {
        guard let object = JSONValue.parse(bytes: data), object.objectValue != nil else {
            return .failure(Problems(errors: [FCMError(.invalidServiceAccount, "\(source): not a JSON object")]))
        }
        var problems: [FCMError] = []
        func field(_ name: String) -> String? {
            guard let value = object[name]?.stringValue, !value.isEmpty else {
                problems.append(FCMError(.invalidServiceAccount, "\(source): field \"\(name)\" is missing or not a string"))
                return nil
            }
            return value
        }
        if let type = field("type"), type != "service_account" {
            problems.append(FCMError(.invalidServiceAccount, "\(source): field \"type\" is \"\(type.prefix(40))\", expected \"service_account\""))
        }
        let projectId = field("project_id")
        let clientEmail = field("client_email")
        var tokenURI = field("token_uri")
        if let text = tokenURI, let problem = tokenURIProblem(text) {
            problems.append(FCMError(.invalidServiceAccount, "\(source): field \"token_uri\" \(problem)"))
            tokenURI = nil
        }
        var key: PrivateKey?
        if let pem = field("private_key") {
            if let parsed = try? PrivateKey(pem: pem) {
                if parsed.isRSA {
                    key = parsed
                } else {
                    problems.append(FCMError(.invalidServiceAccount, "\(source): field \"private_key\" is not an RSA key"))
                }
            } else {
                problems.append(FCMError(.invalidServiceAccount, "\(source): field \"private_key\" is not a PEM private key"))
            }
        }
        guard problems.isEmpty, let projectId, let clientEmail, let tokenURI, let key else { return .failure(Problems(errors: problems)) }
        return .success(ServiceAccount(projectId: projectId, clientEmail: clientEmail, tokenURI: tokenURI, privateKey: key,
                                       privateKeyId: object["private_key_id"]?.stringValue))
    }
}
