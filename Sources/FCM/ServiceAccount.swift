import Crypto
import FoundationEssentials
import JSON

/// The fields of a Google service-account JSON key file that FCM needs.
public struct ServiceAccount: Sendable {
    public var projectId: String
    public var clientEmail: String
    /// The OAuth token endpoint (the JSON's `token_uri`).
    public var tokenURI: String
    /// The RS256 signing key (never printed).
    public let privateKey: PrivateKey
    public var privateKeyId: String?

    /// Reads and validates the file; the error names the file and the missing or bad field.
    public static func load(path: String) throws(FCMError) -> ServiceAccount {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw FCMError(.invalidServiceAccount, "\(path): cannot read the file")
        }
        return try parse(data, source: path)
    }

    /// Parses service-account JSON; `source` names it in errors.
    public static func parse(_ data: Data, source: String) throws(FCMError) -> ServiceAccount {
        guard let object = JSONValue.parse(bytes: data), object.objectValue != nil else {
            throw FCMError(.invalidServiceAccount, "\(source): not a JSON object")
        }
        func field(_ name: String) throws(FCMError) -> String {
            guard let value = object[name]?.stringValue, !value.isEmpty else {
                throw FCMError(.invalidServiceAccount, "\(source): field \"\(name)\" is missing or not a string")
            }
            return value
        }
        if let type = object["type"]?.stringValue, type != "service_account" {
            throw FCMError(.invalidServiceAccount, "\(source): field \"type\" is \"\(type)\", expected \"service_account\"")
        }
        let projectId = try field("project_id")
        let clientEmail = try field("client_email")
        let tokenURI = try field("token_uri")
        guard let url = URL(string: tokenURI), url.scheme == "https" || url.scheme == "http", url.host != nil else {
            throw FCMError(.invalidServiceAccount, "\(source): field \"token_uri\" is not an http(s) URL")
        }
        let pem = try field("private_key")
        let key: PrivateKey
        do { key = try PrivateKey(pem: pem) } catch {
            throw FCMError(.invalidServiceAccount, "\(source): field \"private_key\" is not a PEM private key")
        }
        guard !key.isEC else {
            throw FCMError(.invalidServiceAccount, "\(source): field \"private_key\" is not an RSA key")
        }
        return ServiceAccount(projectId: projectId, clientEmail: clientEmail, tokenURI: tokenURI, privateKey: key,
                              privateKeyId: object["private_key_id"]?.stringValue)
    }
}
