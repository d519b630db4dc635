import Foundation
import HTTP
import Logging
import Metrics
import Synchronization

/// Where and how to send.
public struct FCMConfiguration: Sendable {
    public var serviceAccount: ServiceAccount
    /// `https://fcm.googleapis.com` in production; the emulator's URL in tests.
    public var baseURL: String
    public var http: HTTPClientConfiguration

    public init(serviceAccount: ServiceAccount, baseURL: String = "https://fcm.googleapis.com",
                http: HTTPClientConfiguration = .init(requestTimeout: .seconds(15))) {
        self.serviceAccount = serviceAccount
        self.baseURL = baseURL
        self.http = http
    }
}

/// Sends DOSE_TAKEN pushes through FCM HTTP v1 over one multiplexing HTTP client.
public final class FCMSender: PushSender {
    public let http: HTTPClient
    public let tokens: AccessTokenProvider
    private let endpoint: String
    private let logger: Logger
    private let duration: Histogram
    private let now: @Sendable () -> Date
    /// The request headers for the current access token, built once per token (not per send).
    private let headers = Mutex<(token: String, headers: [String: String])?>(nil)

    public init(configuration: FCMConfiguration, logger: Logger, metrics: MetricsRegistry,
                now: @escaping @Sendable () -> Date = Date.init) throws(HTTPError) {
        http = try HTTPClient(configuration: configuration.http)
        tokens = AccessTokenProvider(account: configuration.serviceAccount, http: http, metrics: metrics,
                                     logger: logger, now: now)
        endpoint = "\(configuration.baseURL)/v1/projects/\(configuration.serviceAccount.projectId)/messages:send"
        self.logger = logger
        self.now = now
        duration = metrics.histogram("push_send_duration_seconds", help: "Time from sending an FCM request to its answer.")
    }

    /// Fetches an access token, proving the credentials work (readiness).
    public func checkCredentials() async throws {
        _ = try await tokens.token()
    }

    public func send(_ push: DoseTakenPush) async -> SendOutcome {
        let body = FCMMessage.json(for: push)
        for attempt in 0..<2 {
            let token: String
            do {
                token = try await tokens.token()
            } catch {
                logger.warning("cannot get an FCM access token", metadata: ["error": "\(error)"])
                return .retry(reason: "OAUTH_TOKEN_UNAVAILABLE", after: nil, minimumBackoff: nil)
            }
            let request = HTTPRequest(method: "POST", url: endpoint, headers: requestHeaders(for: token), body: body)
            let started = ContinuousClock.now
            let response: HTTPResponse
            do {
                response = try await http.execute(request)
            } catch {
                duration.observe((ContinuousClock.now - started).seconds)
                return .retry(reason: "TRANSPORT_\(error.code.description.uppercased()): \(error.message.prefix(160))",
                              after: nil, minimumBackoff: nil)
            }
            duration.observe((ContinuousClock.now - started).seconds)
            switch FCMResponseClassifier.classify(status: response.status, headers: response.headers, body: response.body, now: now()) {
            case .outcome(let outcome):
                return outcome
            case .unauthenticated:
                // The token was revoked or expired early: refresh once, then try again.
                await tokens.invalidate(token)
                if attempt == 0 { continue }
                return .retry(reason: "UNAUTHENTICATED", after: nil, minimumBackoff: nil)
            }
        }
        return .retry(reason: "UNAUTHENTICATED", after: nil, minimumBackoff: nil)
    }

    private func requestHeaders(for token: String) -> [String: String] {
        headers.withLock { cached in
            if let cached, cached.token == token { return cached.headers }
            let built = ["Authorization": "Bearer \(token)", "Content-Type": "application/json; charset=UTF-8"]
            cached = (token, built)
            return built
        }
    }

    /// Stops the HTTP client; in-flight sends fail as transport errors.
    public func shutdown() { http.shutdown() }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
