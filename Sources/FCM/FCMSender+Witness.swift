import Dispatch
import FoundationEssentials
import HTTP
import JSON
import Metrics
import Push
import Synchronization

/// What the database offers a disabling answer's dry run (the daemon's `KnownGoodTokens`).
public struct WitnessCandidates: Sendable, Equatable {
    /// Disables the fleet may make without a witness (`OutboxStore.unwitnessedDisableCap`).
    public static let unwitnessedDisableCap = 10

    /// Tokens of devices that received a push lately, newest first, none of them a suspect.
    public var tokens: [String]
    /// Whether the fleet has made fewer unwitnessed disables than the cap.
    public var unwitnessedAllowanceLeft: Bool

    public init(tokens: [String] = [], unwitnessedAllowanceLeft: Bool = true) {
        self.tokens = tokens
        self.unwitnessedAllowanceLeft = unwitnessedAllowanceLeft
    }
}

/// A disabling answer held until the witness's verdict: how to finish its send.
struct DisableWaiter: Sendable {
    var answer: DisablingAnswer
    /// The gate's ticket of the send (a probe's answer ends or extends its pause with the verdict).
    var ticket: UInt64
    var completion: @Sendable (SendOutcome) -> Void
}

/// The sender's half of "a disable needs a witness": one lock around `DisableWitness`, the dry run to known-good tokens,
/// the verdicts carried out (gate, completion, metrics). Nothing is decided here.
final class WitnessDesk: Sendable {
    private let witness: Mutex<DisableWitness<DisableWaiter>>
    /// Tokens of devices that received a push lately, newest first, other than the ones given (the daemon asks the
    /// database); nil: it could not be asked.
    private let knownGoodTokens: @Sendable ([String]) async -> WitnessCandidates?
    /// The sender's client, credentials and URL: a dry run goes where the sends go, with the same key.
    private let http: HTTPClient
    private let tokens: AccessTokenProvider
    private let endpoint: String
    private let verdicts: [DisablingAnswer: [String: Counter]]
    private let dryRuns: [String: Counter]

    init(wait: Duration, http: HTTPClient, tokens: AccessTokenProvider, endpoint: String, metrics: MetricsRegistry,
         knownGoodTokens: @escaping @Sendable ([String]) async -> WitnessCandidates?) {
        witness = Mutex(DisableWitness(wait: wait))
        self.knownGoodTokens = knownGoodTokens
        self.http = http
        self.tokens = tokens
        self.endpoint = endpoint
        var verdicts: [DisablingAnswer: [String: Counter]] = [:]
        for answer in DisablingAnswer.allCases {
            for verdict in DisableVerdict.labels {
                verdicts[answer, default: [:]][verdict] = metrics.counter(
                    "fcm_disabling_answers_total",
                    help: "Answers that would disable a device (UNREGISTERED, NOT_FOUND, INVALID_ARGUMENT, SENDER_ID_MISMATCH) by verdict: witnessed (disabled), unwitnessed (a new deployment's, within the fleet's allowance), project_fault (a known-good token answered the same), retried (no verdict).",
                    labels: ["answer": answer.rawValue, "verdict": verdict])
            }
        }
        self.verdicts = verdicts
        var dryRuns: [String: Counter] = [:]
        for result in ["accepted", "refused", "inconclusive"] {
            dryRuns[result] = metrics.counter("fcm_dry_runs_total",
                                              help: "validate_only dry runs sent to a known-good token to witness a disabling answer, by FCM's answer (each counts against the project's quota).",
                                              labels: ["result": result])
        }
        self.dryRuns = dryRuns
    }

    /// FCM accepted a push for `token`, sent at `began`: every disabling answer that came before is witnessed (or sent
    /// again, if it came while a project fault stood).
    func accepted(token: String, began: ContinuousClock.Instant, apply: (DisableWaiter, DisableVerdict) -> Void) {
        let judged = witness.withLock { $0.accepted(token: token, began: began) }
        for (waiter, verdict) in judged { decided(waiter, verdict, apply: apply) }
    }

    /// A disabling answer, come now: held for a witness.
    func disabling(token: String, waiter: DisableWaiter, apply: @escaping @Sendable (DisableWaiter, DisableVerdict) -> Void) {
        let now = ContinuousClock.now
        switch witness.withLock({ $0.disabling(token: token, at: now, waiter: waiter) }) {
        case .wait:
            break
        case .check(let delay):
            armCheck(after: delay, apply: apply)
        }
    }

    private func armCheck(after delay: Duration, apply: @escaping @Sendable (DisableWaiter, DisableVerdict) -> Void) {
        DispatchQueue.global().asyncAfter(deadline: .now() + delay.asSeconds) { [self] in
            Task { await check(apply: apply) }
        }
    }

    /// Every held answer, given back unjudged (stop): each send is retried by its event.
    func giveBack(apply: (DisableWaiter, DisableVerdict) -> Void) {
        for waiter in witness.withLock({ $0.drain() }) { decided(waiter, .retry, apply: apply) }
    }

    /// Known-good tokens a dry run tries at most: this process's last accepted one, then the database's, each of
    /// another owner. A project fault needs every one of them refused: one token, even the newest, may have died since
    /// (a hostile app's own phones can be the newest to receive a push; uninstalled, they refused every dry run, and
    /// its made-up tokens kept the pause going for minutes). Once a fault is declared so, a probe's disabling answer
    /// is checked against one: an acceptance ends the fault, a refusal keeps it, and FCM is not asked four times per
    /// probe while the project is down.
    static let witnessesTried = 4

    /// No 200 came within the wait: a dry run to known-good tokens other than the suspects, in order, until one is
    /// accepted.
    private func check(apply: @escaping @Sendable (DisableWaiter, DisableVerdict) -> Void) async {
        guard let suspects = witness.withLock({ $0.checkDue(at: .now) }) else { return }
        guard let known = await knownGoodTokens(Array(suspects)) else {
            // The database could not say which tokens are good: no verdict (not a new deployment's allowance).
            finish(.inconclusive, apply: apply)
            return
        }
        let tokens = witness.withLock { $0.witnesses(known: known.tokens, suspects: suspects) }
        if tokens.isEmpty, !known.unwitnessedAllowanceLeft, let answer = witness.withLock({ $0.waiting.first?.waiter.answer }) {
            finish(.allowanceUsed(answer), apply: apply)
            return
        }
        var answers: [(token: String, answer: DryRunResult.Answer)] = []
        let tries = witness.withLock { $0.fault == nil } ? Self.witnessesTried : 1
        for token in tokens.prefix(tries) {
            let answer = await dryRun(token)
            switch answer {
            case .accepted: dryRuns["accepted"]?.increment()
            case .refused: dryRuns["refused"]?.increment()
            case .inconclusive: dryRuns["inconclusive"]?.increment()
            }
            answers.append((token, answer))
            if answer == .accepted { break }
        }
        finish(DryRunResult.combine(answers), apply: apply)
    }

    private func finish(_ result: DryRunResult, apply: @escaping @Sendable (DisableWaiter, DisableVerdict) -> Void) {
        let (decided, recheck, delay) = witness.withLock { witness in
            let (decided, recheck) = witness.dryRunAnswered(result)
            return (decided, recheck, witness.recheckDelay)
        }
        for (waiter, verdict) in decided { self.decided(waiter, verdict, apply: apply) }
        if recheck { armCheck(after: delay, apply: apply) }
    }

    /// A `validate_only` send to `token` with the sender's key: FCM's verdict on the token and the project.
    private func dryRun(_ token: String) async -> DryRunResult.Answer {
        guard let access = try? await tokens.token() else { return .inconclusive }
        let request = HTTPRequest(method: .post, url: endpoint,
                                  headers: ["Authorization": "Bearer \(access)", "Content-Type": "application/json"],
                                  body: Self.dryRunBody(token: token), timeout: .seconds(10))
        guard let response = try? await http.execute(request) else { return .inconclusive }
        switch FCMResponseClassifier.classify(status: response.status, headers: response.headers, body: response.body, now: Date()) {
        case .outcome(.sent): return .accepted
        case .outcome(.tokenInvalid(let answer, _)): return .refused(answer)
        default: return .inconclusive
        }
    }

    /// The body of a `validate_only` send to `token`: FCM checks the token and the project, and delivers nothing.
    static func dryRunBody(token: String) -> [UInt8] {
        Array(JSONValue.object([
            "validate_only": .bool(true),
            "message": .object(["token": .string(token), "data": .object(["type": .string("WITNESS")])]),
        ]).serialized.utf8)
    }

    private func decided(_ waiter: DisableWaiter, _ verdict: DisableVerdict, apply: (DisableWaiter, DisableVerdict) -> Void) {
        verdicts[waiter.answer]?[verdict.label]?.increment()
        apply(waiter, verdict)
    }
}
