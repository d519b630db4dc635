import Crypto
import Foundation
import HTTPServer
import Synchronization
import Timekeeping

/// A loopback stand-in for FCM HTTP v1 and Google's OAuth token endpoint, speaking their wire
/// format: RS256 assertion checks, bearer tokens, FCM-style validation, and every FCM answer of docs/operations.md,
/// "When FCM fails", selected by the device token's prefix. Written independently of the FCM module (its own JSON
/// handling), so tests of the client prove something.
public final class FCMEmulator: Sendable {
    /// Emulator settings.
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        public var port: UInt16 = 0
        /// nil serves plain HTTP (only for tools; tests use TLS).
        public var tls: TLSIdentity?
        /// The service account's public key: assertions must verify against it.
        public var assertionPublicKeyPEM: String
        /// Expected `iss` of assertions (nil = any).
        public var clientEmail: String?
        /// `expires_in` of issued access tokens.
        public var tokenLifetime = 3600
        /// Length of issued access tokens (nil: a short one). Google's are opaque and long: service-account tokens
        /// run to about a kilobyte, and Google documents room for 2,048 bytes.
        public var tokenBytes: Int?
        /// Added to every send, to emulate a slow FCM.
        public var latency: Duration = .zero
        /// Keep every accepted message body (tests); off for long benchmarks.
        public var recordMessages = true
        /// Answer every send with 503 UNAVAILABLE for this long after start (fault drills).
        public var unavailableFor: Duration = .zero
        /// The `Retry-After` of that window's answers (nil: the window's length).
        public var unavailableRetryAfter: Duration?
        /// The project's quota, enforced as nginx's `limit_req` does (`rate` sends a second, `burst` more at once):
        /// a send over it gets Google's 429 RESOURCE_EXHAUSTED with the QUOTA_EXCEEDED FcmError and no `Retry-After`.
        /// nil: no quota.
        public var projectQuota: (rate: Double, burst: Int)?
        /// Answer every send with Google's plain 404 NOT_FOUND (`ProjectFault.notFound`) once this long has passed since
        /// start: a healthy start, then a deleted project or a proxy rewriting the path. nil: never.
        public var notFoundAfter: Duration?

        public init(assertionPublicKeyPEM: String, tls: TLSIdentity?) {
            self.assertionPublicKeyPEM = assertionPublicKeyPEM
            self.tls = tls
        }
    }

    /// A message FCM accepted.
    public struct Received: Sendable {
        public var projectId: String
        /// The request body as sent.
        public var json: String
        public var token: String
        public var receivedAt: Date
    }

    /// Counters reported on `/stats`.
    public struct Stats: Sendable, Equatable {
        public var tokensIssued = 0
        public var assertionsRefused = 0
        public var sendsByOutcome: [String: Int] = [:]
        public var connections = 0
        /// Accepted messages whose (token, apns-collapse-id) was accepted before.
        public var duplicates = 0
        /// Sends that came back before the Retry-After this emulator gave for that token.
        public var earlyRetries = 0
        /// Distinct (token, collapse id) pairs accepted.
        public var distinctAccepted = 0
        /// Requests to the token endpoint, granted or refused.
        public var tokenRequests = 0
    }

    let configuration: Configuration
    let publicKey: PublicKey
    /// What the emulator has issued, received and been told to fail, behind one lock.
    struct State {
        var issued: [String: Date] = [:]
        var received: [Received] = []
        var counters = Stats()
        var scriptedFailures: [String: (count: Int, status: Int)] = [:]
        var acceptedKeys: Set<String> = []
        var retryNotBefore: [String: Date] = [:]
        var projectFault: ProjectFault?
        /// Tokens answered UNREGISTERED whatever their prefix (an app uninstalled after it received pushes).
        var unregistered: Set<String> = []
        /// Every token request is refused with this OAuth error while set (until `tokenRefusalUntil`, when set).
        var tokenRefusal: (error: String, description: String)?
        var tokenRefusalUntil: Date?
        /// The quota's sends still allowed at once, and when that was computed.
        var quotaAllowance: Double?
        var quotaUpdated = Date()
    }

    let state = Mutex(State())
    /// Set once in `init` (the handler needs `self` first).
    private let serverSlot = Mutex<HTTPServer?>(nil)
    private var server: HTTPServer { serverSlot.withLock { $0! } }
    let startedAt = Date()

    /// A fault of the whole project or of the path to FCM, answered to every send while set.
    public enum ProjectFault: Sendable, Equatable {
        /// 503 UNAVAILABLE with `Retry-After: seconds`.
        case unavailable(retryAfterSeconds: Int)
        /// 403 PERMISSION_DENIED without SENDER_ID_MISMATCH (IAM role missing, API disabled).
        case permissionDenied
        /// A proxy's (or a mistyped base URL's) HTML 404.
        case htmlNotFound
        /// 403 SENDER_ID_MISMATCH (with the FcmError detail) for every token, as FCM answers a service account of
        /// another Firebase project than the tokens'. Answered after authentication and validation, as FCM does.
        case senderIdMismatch
        /// Google's plain 404 NOT_FOUND ("Requested entity was not found.", no FcmError detail) for every send, as FCM
        /// answers for a deleted or mistyped project or a path a proxy rewrote. Answered after authentication and validation.
        case notFound
    }

    /// Refuses every token request as Google does when the service account's key is deleted or disabled (400
    /// `invalid_grant` "Invalid JWT Signature."), for `duration` or until called again with nil.
    public func refuseTokens(_ refusal: (error: String, description: String)? = ("invalid_grant", "Invalid JWT Signature."),
                             for duration: Duration? = nil) {
        state.withLock { s in
            s.tokenRefusal = refusal
            s.tokenRefusalUntil = duration.map { Date().addingTimeInterval(Double($0.components.seconds)) }
        }
    }

    /// Starts (or with nil, ends) answering every send with a project-wide fault.
    public func setProjectFault(_ fault: ProjectFault?) { state.withLock { s in s.projectFault = fault } }

    /// From now on `token` is answered UNREGISTERED (its app was uninstalled), as a dry run to it is.
    public func unregister(_ token: String) { _ = state.withLock { s in s.unregistered.insert(token) } }

    /// Starts serving at once.
    public init(configuration: Configuration) throws {
        self.configuration = configuration
        publicKey = try PublicKey(pem: configuration.assertionPublicKeyPEM)
        let server = try HTTPServer(host: configuration.host, port: configuration.port, tls: configuration.tls) { [unowned self] request in
            self.handle(request)
        }
        serverSlot.withLock { $0 = server }
    }

    deinit { serverSlot.withLock { $0?.stop() } }

    /// `https://127.0.0.1:PORT` (the FCM_BASE_URL to configure).
    public var baseURL: String { "\(configuration.tls == nil ? "http" : "https")://\(configuration.host):\(server.port)" }
    /// The token endpoint to put in the service account's `token_uri`.
    public var tokenURI: String { baseURL + "/token" }
    public var port: UInt16 { server.port }

    /// Every accepted message, in arrival order.
    public var receivedMessages: [Received] { state.withLock { s in s.received } }

    public var stats: Stats {
        var snapshot = state.withLock { s in s.counters }
        snapshot.connections = server.connectionsAccepted
        return snapshot
    }

    /// Makes the next `count` sends to `token` fail with `status` (429, 500 or 503), then succeed.
    public func failNext(token: String, count: Int, status: Int = 503) {
        state.withLock { s in s.scriptedFailures[token] = (count, status) }
    }

    /// Revokes every issued access token (the next send with one gets 401 UNAUTHENTICATED).
    public func revokeAccessTokens() { state.withLock { s in s.issued.removeAll() } }

    public func stop() { server.stop() }

    func handle(_ request: HTTPServerRequest) -> HTTPServerResponse {
        switch (request.method, request.path) {
        case ("POST", "/token"):
            return issueToken(request)
        case ("GET", "/stats"):
            let stats = self.stats
            let object: [String: Any] = ["tokensIssued": stats.tokensIssued, "assertionsRefused": stats.assertionsRefused,
                                         "sends": stats.sendsByOutcome, "connections": stats.connections,
                                         "duplicates": stats.duplicates, "earlyRetries": stats.earlyRetries,
                                         "distinctAccepted": stats.distinctAccepted, "tokenRequests": stats.tokenRequests]
            return .json(200, Self.serialize(object))
        case ("GET", "/received"):
            // Arrival times by recordingGroupId, for end-to-end latency measurements.
            let items = receivedMessages.map { item -> [String: Any] in
                let root = (try? JSONSerialization.jsonObject(with: Data(item.json.utf8))) as? [String: Any]
                let data = (root?["message"] as? [String: Any])?["data"] as? [String: Any]
                return ["recordingGroupId": data?["recordingGroupId"] as? String ?? "", "receivedAt": item.receivedAt.timeIntervalSince1970]
            }
            return .json(200, Self.serialize(items))
        case ("GET", "/received/bodies"):
            // Every accepted request body as sent, for inspection (the emulator keeps them unless --no-record).
            return .json(200, Self.serialize(receivedMessages.map { ["bytes": $0.json.utf8.count, "body": $0.json] }))
        case ("POST", let path) where path.hasPrefix("/v1/projects/") && path.hasSuffix("/messages:send"):
            let project = String(path.dropFirst("/v1/projects/".count).dropLast("/messages:send".count))
            if configuration.latency > .zero {
                Thread.sleep(forTimeInterval: configuration.latency.asSeconds)
            }
            return send(request, project: project)
        default:
            return Self.googleError(404, "NOT_FOUND", "Requested entity was not found.", errorCode: nil)
        }
    }

    static func serialize(_ object: Any) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    func count(_ outcome: String) { state.withLock { s in s.counters.sendsByOutcome[outcome, default: 0] += 1 } }
}
