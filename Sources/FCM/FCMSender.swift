import FoundationEssentials
import HTTP
import Logging
import Metrics
import Push
import Synchronization
import Timekeeping

/// Where and how to send.
public struct FCMConfiguration: Sendable {
    public var serviceAccount: ServiceAccount
    /// `https://fcm.googleapis.com` in production; the emulator's URL in tests.
    public var baseURL: String
    public var http: HTTPClientConfiguration
    /// This instance's sends per second at start (its share of `FCM_MAX_SENDS_PER_SECOND`; nil: no cap; 0: every send
    /// parked until a share is given); the live-instances heartbeat updates it through `FCMSender.setSendBudget(perSecond:)`.
    public var maxSendsPerSecond: Double?
    /// How long sending pauses at least after the project's QUOTA_EXCEEDED without `Retry-After`: FCM asks for 60 s.
    /// Shorter only in tests.
    public var quotaPause: Duration
    /// A send parked through a pause for longer than this is given back instead of sent (`.notSent`): its event is
    /// claimed again and its recipients are decided anew (docs/operations.md, "Who gets the push": a
    /// link revoked or a phone that changed hands during an outage). Waits for the send rate alone never count.
    public var maxParkedThroughPause: Duration
    /// Tokens of devices that received a push lately, newest first, leaving out the tokens given (the ones under
    /// suspicion): what a disabling answer's dry run is sent to when no 200 witnessed it (the daemon asks the
    /// database; empty: none known, as in a new deployment; nil: the database could not be asked).
    public var knownGoodTokens: @Sendable (_ excluding: [String]) async -> WitnessCandidates?
    /// How long a disabling answer waits for a 200 to witness it before a dry run is sent.
    public var witnessWait: Duration

    public init(serviceAccount: ServiceAccount, baseURL: String = "https://fcm.googleapis.com",
                http: HTTPClientConfiguration = .init(requestTimeout: .seconds(15)), maxSendsPerSecond: Double? = nil,
                quotaPause: Duration = .seconds(60), maxParkedThroughPause: Duration = .seconds(30),
                knownGoodTokens: @escaping @Sendable (_ excluding: [String]) async -> WitnessCandidates? = { _ in WitnessCandidates() }, witnessWait: Duration = .milliseconds(1500)) {
        self.serviceAccount = serviceAccount
        self.baseURL = baseURL
        self.http = http
        self.maxSendsPerSecond = maxSendsPerSecond
        self.quotaPause = quotaPause
        self.maxParkedThroughPause = maxParkedThroughPause
        self.knownGoodTokens = knownGoodTokens
        self.witnessWait = witnessWait
    }
}

/// Sends DOSE_TAKEN pushes through FCM HTTP v1 over one multiplexing HTTP client.
public final class FCMSender: PushSender {
    package let http: HTTPClient
    package let tokens: AccessTokenProvider
    private let endpoint: String
    private let logger: Logger
    private let maxParkedThroughPause: Duration
    private let duration: Histogram
    private let now: @Sendable () -> Date
    /// The request headers for the current access token, built once per token (not per send).
    private let headers = Mutex<(token: String, headers: [String: String])?>(nil)

    let gate: SendGate
    /// Tells a dead token's disabling answer from a fault of the project (docs/operations.md, "A disable needs a witness").
    private let witness: WitnessDesk
    /// The service account's project, named in the reasons of a project fault.
    private let projectId: String
    private let quotaPause: Duration

    /// `onHealth` hears when sending pauses for a fault and when it resumes (`/readyz`'s `fcm` check);
    /// `onCredentials` what the OAuth token endpoint last said (`fcm_credentials`).
    public init(configuration: FCMConfiguration, logger: Logger, metrics: MetricsRegistry,
                now: @escaping @Sendable () -> Date = Date.init, onHealth: @escaping @Sendable (FCMHealth) -> Void = { _ in },
                onCredentials: @escaping @Sendable (AccessTokenProvider.Status) -> Void = { _ in }) throws(HTTPError) {
        // Overload and connection faults pause after this many in a row (a single device's 429 must not).
        gate = SendGate(threshold: min(5, max(2, configuration.http.maxInFlight)), budget: configuration.maxSendsPerSecond,
                        logger: logger, metrics: metrics, onHealth: onHealth)
        quotaPause = configuration.quotaPause
        maxParkedThroughPause = configuration.maxParkedThroughPause
        projectId = configuration.serviceAccount.projectId
        http = try HTTPClient(configuration: configuration.http)
        tokens = AccessTokenProvider(account: configuration.serviceAccount, http: http, metrics: metrics,
                                     logger: logger, now: now, onStatus: onCredentials)
        endpoint = "\(configuration.baseURL)/v1/projects/\(configuration.serviceAccount.projectId)/messages:send"
        witness = WitnessDesk(wait: configuration.witnessWait, http: http, tokens: tokens, endpoint: endpoint, metrics: metrics,
                              knownGoodTokens: configuration.knownGoodTokens)
        self.logger = logger
        self.now = now
        duration = metrics.histogram("push_send_duration_seconds", help: "Time from sending an FCM request to its answer.")
        Self.countHandshakes(of: http, in: metrics)
    }

    /// `fcm_tls_handshakes_total{session}`, brought up to the client's counts at each scrape: `full` when a new
    /// connection exchanged certificates, `resumed` when it took up an earlier connection's session. Every connection
    /// after the first should resume; full ones climbing with the connections means the session is refused.
    private static func countHandshakes(of http: HTTPClient, in metrics: MetricsRegistry) {
        let help = "TLS handshakes of new connections to FCM and the OAuth token endpoint: full, or resuming an earlier connection's session."
        let full = metrics.counter("fcm_tls_handshakes_total", help: help, labels: ["session": "full"])
        let resumed = metrics.counter("fcm_tls_handshakes_total", help: help, labels: ["session": "resumed"])
        let counted = Mutex(TLSHandshakes(full: 0, resumed: 0))
        metrics.onCollect { [weak http] in
            guard let now = http?.tlsHandshakes else { return }
            counted.withLock { last in
                full.increment(by: Double(now.full - last.full))
                resumed.increment(by: Double(now.resumed - last.resumed))
                last = now
            }
        }
    }

    /// Fetches an access token, proving the credentials work (readiness).
    public func checkCredentials() async throws {
        _ = try await tokens.token()
    }

    public func start(_ push: DoseTakenPush, completion: @escaping @Sendable (SendOutcome) -> Void) {
        let submitted = ContinuousClock.now
        let pausesBefore = gate.pausesBegun
        // The gate's go-ahead for a send it kept (paced, or parked through a pause).
        let kept = SendGate.Send(
            run: { [self] ticket in
                if gate.pausesBegun != pausesBefore, ContinuousClock.now - submitted > maxParkedThroughPause {
                    gate.abandoned(ticket: ticket)
                    completion(.notSent(reason: "parked through an FCM pause; its recipients are checked again on the next claim"))
                    return
                }
                begin(push, ticket: ticket, completion)
            },
            drop: { completion(.notSent(reason: "parked while sending was paused for an FCM fault; not transmitted")) })
        if let ticket = gate.submit(kept) { begin(push, ticket: ticket, completion) }
    }

    public func cancelWaiting() {
        gate.dropParked()
        witness.giveBack(apply: carryOut)
    }

    /// This instance's share of the project's FCM budget, in sends per second (nil: no cap; 0: hold every send); the
    /// cap applies from now on (docs/operations.md, "FCM's project quota").
    public func setSendBudget(perSecond: Double?) { gate.setBudget(perSecond) }

    /// The sends per second this instance allows itself now (nil: no cap): its budget share, or less after FCM's
    /// project quota was hit.
    public var sendRateLimit: Double? { gate.rateLimitState.cap }

    public func cancelInFlight() {
        gate.dropParked()
        witness.giveBack(apply: carryOut)
        http.cancelAll()
    }

    private func begin(_ push: DoseTakenPush, ticket: UInt64, _ completion: @escaping @Sendable (SendOutcome) -> Void) {
        if let token = tokens.cachedToken() {
            perform(push, token: token, refreshed: false, ticket: ticket, completion)
            return
        }
        // No fresh token cached: fetch one (one shared refresh for all callers), then send.
        Task {
            do {
                perform(push, token: try await tokens.token(), refreshed: false, ticket: ticket, completion)
            } catch {
                logger.warning("cannot get an FCM access token", metadata: ["error": "\(error)"])
                gate.fault(.project, reason: "OAUTH_TOKEN_UNAVAILABLE", retryAfter: nil, ticket: ticket)
                completion(.retry(reason: "OAUTH_TOKEN_UNAVAILABLE", after: nil, minimumBackoff: nil))
            }
        }
    }

    /// One POST; the answer is classified on the HTTP driver thread and reported to the gate. A 401
    /// refreshes the token once and retries; one that persists is a project fault.
    private func perform(_ push: DoseTakenPush, token: String, refreshed: Bool, ticket: UInt64,
                         _ completion: @escaping @Sendable (SendOutcome) -> Void) {
        let request = HTTPRequest(method: .post, url: endpoint, headers: requestHeaders(for: token), body: FCMMessage.json(for: push))
        let started = ContinuousClock.now
        http.start(request) { [self] result in
            duration.observe((ContinuousClock.now - started).asSeconds)
            let response: HTTPResponse
            switch result {
            case .failure(let error):
                let reason = "TRANSPORT_\(error.code.description.uppercased()): \(error.message.prefix(160))"
                if error.code != .cancelled && error.code != .shutdown && error.code != .queued {
                    gate.fault(.connection, reason: reason, retryAfter: nil, ticket: ticket)
                } else {
                    // No answer, and none will come: the next parked send probes instead. A send whose deadline passed while
                    // it waited in libcurl for a connection never reached FCM (its owner reports the connection's fault).
                    gate.abandoned(ticket: ticket)
                }
                completion(.retry(reason: reason, after: nil, minimumBackoff: nil))
                return
            case .success(let answer):
                response = answer
            }
            // A success never needs the headers: skip parsing them.
            let headers = response.status == 200 ? [:] : response.headers
            switch FCMResponseClassifier.classify(status: response.status, headers: headers, body: response.body, now: now()) {
            case .outcome(.tokenInvalid(let answer, _)):
                awaitWitness(push.token, answer: answer, ticket: ticket, completion)
            case .outcome(let outcome):
                // A device over its own message rate says nothing against FCM or the project. A 200 witnesses every
                // disabling answer that came before its send began.
                gate.healthy(ticket: ticket)
                if case .sent = outcome { witness.accepted(token: push.token, began: started, apply: carryOut) }
                completion(outcome)
            case .overloaded(let reason, let after, let minimum, let quota):
                // The project's quota: pause as FCM asks (Retry-After, else 60 s), then resume below the rate that hit it.
                gate.fault(.overload, reason: reason, retryAfter: after, minimumPause: quota && minimum != nil ? quotaPause : nil,
                           quota: quota, ticket: ticket)
                completion(.retry(reason: reason, after: after, minimumBackoff: minimum))
            case .projectFault(let reason, let retryAfter):
                gate.fault(.project, reason: reason, retryAfter: retryAfter, ticket: ticket)
                completion(.retry(reason: "PROJECT_FAULT: \(reason)", after: retryAfter, minimumBackoff: nil))
            case .unauthenticated where refreshed:
                gate.fault(.project, reason: "UNAUTHENTICATED after a token refresh", retryAfter: nil, ticket: ticket)
                completion(.retry(reason: "UNAUTHENTICATED", after: nil, minimumBackoff: nil))
            case .unauthenticated:
                // The token was revoked or expired early: refresh once, then try again.
                Task {
                    await tokens.invalidate(token)
                    do {
                        perform(push, token: try await tokens.token(), refreshed: true, ticket: ticket, completion)
                    } catch {
                        gate.fault(.project, reason: "OAUTH_TOKEN_UNAVAILABLE", retryAfter: nil, ticket: ticket)
                        completion(.retry(reason: "UNAUTHENTICATED", after: nil, minimumBackoff: nil))
                    }
                }
            }
        }
    }

    /// How long a disabling answer without a verdict (the dry run had none) waits at least before it is sent again.
    static let unwitnessedRetry: Duration = .seconds(2)

    /// A disabling answer goes to the witness, which decides now or once a 200 or a dry run says whether FCM accepts the key.
    private func awaitWitness(_ token: String, answer: DisablingAnswer, ticket: UInt64,
                              _ completion: @escaping @Sendable (SendOutcome) -> Void) {
        let waiter = DisableWaiter(answer: answer, ticket: ticket, completion: completion)
        witness.disabling(token: token, waiter: waiter, apply: carryOut)
    }

    /// The witness's verdict on a disabling answer, carried out: the gate hears the send's answer, the engine its outcome.
    private func carryOut(_ waiter: DisableWaiter, _ verdict: DisableVerdict) {
        switch verdict {
        case .witnessed, .unwitnessed:
            gate.healthy(ticket: waiter.ticket)
            waiter.completion(.tokenInvalid(waiter.answer, witnessed: verdict == .witnessed))
        case .projectFault(let answer):
            gate.fault(.project, reason: faultReason(answer), retryAfter: nil, cause: answer.rawValue, ticket: waiter.ticket)
            waiter.completion(.retry(reason: "PROJECT_FAULT: \(answer.rawValue)", after: nil, minimumBackoff: nil))
        case .allowanceUsed(let answer):
            let reason = "\(answer.rawValue) for every token, and no token of project \(projectId) was ever accepted: the fleet's "
                + "\(WitnessCandidates.unwitnessedDisableCap) disables without a witness are used up; check FCM_SERVICE_ACCOUNT_FILE "
                + "(is it the app's Firebase project?), FCM_BASE_URL and any proxy"
            gate.fault(.project, reason: reason, retryAfter: nil, cause: answer.rawValue, ticket: waiter.ticket)
            waiter.completion(.retry(reason: "PROJECT_FAULT: \(answer.rawValue) (no witness)", after: nil, minimumBackoff: nil))
        case .retry:
            // No verdict either way: the device keeps its token and the send comes back. A probe's answer is replaced by
            // the next parked send's.
            gate.abandoned(ticket: waiter.ticket)
            waiter.completion(.retry(reason: "\(waiter.answer.rawValue)_UNWITNESSED", after: Self.unwitnessedRetry, minimumBackoff: nil))
        }
    }

    /// What `/readyz` and the log say when a known-good token gets `answer`: the answer, and where an operator looks.
    func faultReason(_ answer: DisablingAnswer) -> String {
        let what = switch answer {
        case .senderIdMismatch:
            "the service account (project \(projectId)) is not the project of the app's tokens; check FCM_SERVICE_ACCOUNT_FILE"
        case .notFound:
            "FCM does not know project \(projectId) at this URL (a deleted or mistyped project, or a proxy rewriting the path); "
                + "check project_id in FCM_SERVICE_ACCOUNT_FILE, FCM_BASE_URL and any proxy"
        case .unregistered:
            "FCM calls the tokens of project \(projectId) unregistered; check that the app registers its tokens with this Firebase project"
        case .invalidToken:
            "FCM refuses the tokens as invalid for project \(projectId); check how the app and the API store tokens"
        }
        return "\(answer.rawValue) for a token that received pushes: \(what)"
    }

    private func requestHeaders(for token: String) -> [String: String] {
        headers.withLock { cached in
            if let cached, cached.token == token { return cached.headers }
            let built = ["Authorization": "Bearer \(token)", "Content-Type": "application/json", "Accept": ""]
            cached = (token, built)
            return built
        }
    }

    /// Stops the HTTP client; in-flight sends fail as transport errors.
    public func shutdown() { http.shutdown() }
}
