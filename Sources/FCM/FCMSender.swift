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

    public func start(_ push: DoseTakenPush, completion: @escaping @Sendable (SendOutcome) -> Void) {
        if let token = tokens.cachedToken() {
            perform(push, token: token, refreshed: false, completion)
            return
        }
        // No fresh token cached: fetch one (one shared refresh for all callers), then send.
        Task {
            do {
                perform(push, token: try await tokens.token(), refreshed: false, completion)
            } catch {
                logger.warning("cannot get an FCM access token", metadata: ["error": "\(error)"])
                completion(.retry(reason: "OAUTH_TOKEN_UNAVAILABLE", after: nil, minimumBackoff: nil))
            }
        }
    }

    public func cancelInFlight() { http.cancelAll() }

    /// One POST; the answer is classified on the HTTP driver thread. A 401 refreshes the token once and retries.
    private func perform(_ push: DoseTakenPush, token: String, refreshed: Bool, _ completion: @escaping @Sendable (SendOutcome) -> Void) {
        let request = HTTPRequest(method: "POST", url: endpoint, headers: requestHeaders(for: token), body: FCMMessage.json(for: push))
        let started = ContinuousClock.now
        http.start(request) { [self] result in
            duration.observe((ContinuousClock.now - started).seconds)
            let response: HTTPResponse
            switch result {
            case .failure(let error):
                completion(.retry(reason: "TRANSPORT_\(error.code.description.uppercased()): \(error.message.prefix(160))",
                                  after: nil, minimumBackoff: nil))
                return
            case .success(let answer):
                response = answer
            }
            // A success never needs the headers: skip parsing them.
            let headers = response.status == 200 ? [:] : response.headers
            switch FCMResponseClassifier.classify(status: response.status, headers: headers, body: response.body, now: now()) {
            case .outcome(let outcome):
                completion(outcome)
            case .unauthenticated where refreshed:
                completion(.retry(reason: "UNAUTHENTICATED", after: nil, minimumBackoff: nil))
            case .unauthenticated:
                // The token was revoked or expired early: refresh once, then try again.
                Task {
                    await tokens.invalidate(token)
                    do {
                        perform(push, token: try await tokens.token(), refreshed: true, completion)
                    } catch {
                        completion(.retry(reason: "UNAUTHENTICATED", after: nil, minimumBackoff: nil))
                    }
                }
            }
        }
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
