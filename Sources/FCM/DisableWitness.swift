import Push

/// A disable needs a witness (SPEC §3; docs/operations.md, "A disable needs a witness"). FCM answers UNREGISTERED, a
/// plain 404 NOT_FOUND, an invalid token or SENDER_ID_MISMATCH both for one dead token and for every token when the
/// project, the key, the URL or a proxy is wrong; only another token tells which. The answer is evidence against its
/// token when FCM, with the same credentials, accepts a push for a token known to be good *after* the answer came: a
/// real 200 to a send that began after it, or, when none comes within `wait`, a `validate_only` dry run to a token that
/// received a push. A 200 to a send that began earlier may have been FCM's before the project broke: when a project,
/// key or proxy goes wrong mid-flight, every send on the wire then (500 at 10,000/s and 50 ms) answers NOT_FOUND while
/// 200s begun before it are still arriving, and judged by those, 40 of 400 healthy devices were disabled (a 300 ms FCM
/// turned into a deleted project mid-drain).
///
/// A value: its owner (`FCMSender`) serialises access, runs the dry run and carries out the verdicts. `Waiter` is the
/// owner's answer-in-waiting (a test uses a number).
package struct DisableWitness<Waiter> {
    /// What the owner does with a disabling answer now.
    package enum Step {
        /// Held until the witness's next verdict; nothing to arm.
        case wait
        /// Held; after `after`, call `checkDue` (unless a 200 witnessed everything first) and dry run what it returns.
        case check(after: Duration)
    }

    /// A disabling answer waiting for a witness: its token, when it came, and its owner's waiter.
    package struct Waiting {
        var token: String
        var answered: ContinuousClock.Instant
        var waiter: Waiter
        /// It came while a project fault stood: the project's answer then, whatever FCM accepts later.
        var duringFault: Bool
    }

    /// How long a disabling answer waits for a real 200 before a dry run is sent.
    package let wait: Duration

    /// The token of the newest send FCM accepted in this process (a 200, or a dry run), and when that send began.
    private(set) var lastAccepted: (began: ContinuousClock.Instant, token: String)?
    /// Disabling answers waiting for a witness, oldest first.
    private(set) var waiting: [Waiting] = []
    /// When the check in progress took its suspects (its dry run began after): a check is armed or a dry run is in
    /// flight, one at a time.
    private var checkTaken: ContinuousClock.Instant?
    private var checking = false
    /// The answer of the project fault declared last, until FCM accepts a push again: a disabling answer meanwhile is
    /// checked at once (no real 200 comes while sending is paused).
    private(set) var fault: DisablingAnswer?

    package init(wait: Duration = .milliseconds(1500)) {
        self.wait = wait
    }

    /// FCM accepted a push for `token`, sent at `began`: it witnesses every answer that came before that send began,
    /// except those that came while a project fault stood (`retryUnjudged`).
    package mutating func accepted(token: String, began: ContinuousClock.Instant) -> [(Waiter, DisableVerdict)] {
        if lastAccepted.map({ $0.began <= began }) ?? true { lastAccepted = (began, token) }
        fault = nil
        return takeWaiting { $0.answered < began }.map { ($0.waiter, $0.duringFault ? .retry : .witnessed) }
    }

    /// A disabling answer for `token`, come at `now`: held for a 200 to a later send, or the dry run.
    package mutating func disabling(token: String, at now: ContinuousClock.Instant, waiter: Waiter) -> Step {
        waiting.append(Waiting(token: token, answered: now, waiter: waiter, duringFault: fault != nil))
        guard !checking else { return .wait }
        checking = true
        return .check(after: fault == nil ? wait : .zero)
    }

    /// The check's time came (`now`): the tokens waiting for a witness (the suspects: no dry run goes to one of them, and
    /// the database's known-good tokens leave them out), or nil when a 200 witnessed everything meanwhile.
    package mutating func checkDue(at now: ContinuousClock.Instant) -> Set<String>? {
        guard !waiting.isEmpty else {
            checking = false
            return nil
        }
        checkTaken = now
        return Set(waiting.map(\.token))
    }

    /// The tokens to dry run, in order: this process's last accepted token, then `known` (the database's), never a
    /// suspect. Empty: no token other than the suspects ever received a push, so nothing can witness (a new deployment,
    /// or one whose only phones that ever got a push are the ones now answering so).
    package func witnesses(known: [String], suspects: Set<String>) -> [String] {
        var tokens: [String] = []
        for token in [lastAccepted?.token].compactMap({ $0 }) + known where !suspects.contains(token) && !tokens.contains(token) {
            tokens.append(token)
        }
        return tokens
    }

    /// The dry run's result: a verdict for every answer that came before its check took the suspects. Answers that came
    /// later stay waiting (`recheck`: arm another check): the dry run began before them, so it says nothing of them.
    package mutating func dryRunAnswered(_ result: DryRunResult) -> (decided: [(Waiter, DisableVerdict)], recheck: Bool) {
        let taken = checkTaken ?? .now
        checking = false
        checkTaken = nil
        let verdict: DisableVerdict
        switch result {
        case .accepted(let token):
            if lastAccepted.map({ $0.began <= taken }) ?? true { lastAccepted = (taken, token) }
            fault = nil
            verdict = .witnessed
        case .refused(let answer):
            fault = answer
            verdict = .projectFault(answer)
        case .noKnownGoodToken:
            verdict = .unwitnessed
        case .allowanceUsed(let answer):
            // Like a project fault: checked at once while it lasts, until FCM accepts a push.
            fault = answer
            verdict = .allowanceUsed(answer)
        case .inconclusive:
            verdict = .retry
        }
        // An answer that came while a project fault stood is the project's answer then: a later acceptance (the project
        // healed before the dry run reached FCM) says nothing of its token, which is sent again (a dead one answers
        // again, and that answer is judged as any). Before, such a probe's NOT_FOUND was witnessed by the heal and a
        // healthy phone disabled (seen once in CI's parallel run of the fleet's plain-404 test).
        let decided = takeWaiting { $0.answered <= taken }.map { ($0.waiter, verdict == .witnessed && $0.duringFault ? .retry : verdict) }
        checking = !waiting.isEmpty
        return (decided, checking)
    }

    /// The delay before the check `dryRunAnswered` asked for.
    package var recheckDelay: Duration { fault == nil ? wait : .zero }

    /// Every waiting answer, taken out (given back unjudged at stop).
    package mutating func drain() -> [Waiter] {
        take { _ in true }
    }

    private mutating func take(where belongs: (Waiting) -> Bool) -> [Waiter] {
        takeWaiting(where: belongs).map(\.waiter)
    }

    private mutating func takeWaiting(where belongs: (Waiting) -> Bool) -> [Waiting] {
        let taken = waiting.filter(belongs)
        if !taken.isEmpty { waiting.removeAll(where: belongs) }
        return taken
    }
}

extension DisableWitness: Sendable where Waiter: Sendable {}
extension DisableWitness.Waiting: Sendable where Waiter: Sendable {}

/// What becomes of a disabling answer.
package enum DisableVerdict: Sendable, Equatable {
    /// FCM accepted a known-good token sent after this answer came: the token is dead, disable its device.
    case witnessed
    /// No token of the project ever received a push (a new deployment): disabled within the fleet's allowance
    /// (`OutboxStore.unwitnessedDisableCap`).
    case unwitnessed
    /// A known-good token got a disabling answer too: the project is at fault; pause, disable nothing.
    case projectFault(DisablingAnswer)
    /// Nothing can witness (no token other than the suspects ever received a push) and the fleet's unwitnessed
    /// disables are used up: a new deployment whose every send is refused (a key of another project on day one).
    /// Paused like a project fault, nothing more disabled, until FCM accepts a push.
    case allowanceUsed(DisablingAnswer)
    /// The dry run got no verdict (a timeout, a 5xx): the send is retried later; nothing disabled, nothing paused.
    case retry

    /// The `verdict` label of `fcm_disabling_answers_total`.
    package var label: String {
        switch self {
        case .witnessed: "witnessed"
        case .unwitnessed: "unwitnessed"
        case .projectFault: "project_fault"
        case .allowanceUsed: "allowance_used"
        case .retry: "retried"
        }
    }

    package static let labels = ["witnessed", "unwitnessed", "project_fault", "allowance_used", "retried"]
}

/// What the dry run to the known-good tokens found.
package enum DryRunResult: Sendable, Equatable {
    /// FCM accepted this token.
    case accepted(token: String)
    /// Every known-good token tried got a disabling answer (the first one's).
    case refused(DisablingAnswer)
    /// No token other than the suspects ever received a push, and the fleet may still disable unwitnessed.
    case noKnownGoodToken
    /// No token other than the suspects ever received a push, and the fleet's unwitnessed disables are used up; the
    /// answer of the oldest waiting send.
    case allowanceUsed(DisablingAnswer)
    /// No verdict: a timeout, a 5xx, no access token.
    case inconclusive

    /// One known-good token's answer to a dry run.
    package enum Answer: Sendable, Equatable {
        case accepted
        case refused(DisablingAnswer)
        case inconclusive
    }

    /// The result from each known-good token's answer, in the order tried: an acceptance witnesses; else an answer
    /// without a verdict leaves it open; else every token refused, and the first refusal names the fault.
    package static func combine(_ answers: [(token: String, answer: Answer)]) -> DryRunResult {
        guard !answers.isEmpty else { return .noKnownGoodToken }
        if let accepted = answers.first(where: { $0.answer == .accepted }) { return .accepted(token: accepted.token) }
        for case (_, .refused(let answer)) in answers where !answers.contains(where: { $0.answer == .inconclusive }) {
            return .refused(answer)
        }
        return .inconclusive
    }
}
