@testable import FCM
import Push
import Testing

/// The witness rule as a value: no network, no database, every instant given (SPEC §3, "a disable needs a witness").
@Suite("Disable witness")
struct DisableWitnessTests {
    typealias Witness = DisableWitness<Int>
    let t0 = ContinuousClock.now

    /// A 200 to a send that began after a disabling answer came witnesses it; one to a send begun before does not, though
    /// it was answered after: FCM may have taken that send before the project broke (mid-flight, every send on the wire
    /// answers NOT_FOUND while 200s begun before the fault still arrive).
    @Test func onlyATwoHundredToALaterSend_witnesses() {
        var witness = Witness(wait: .seconds(1))
        guard case .check(let delay) = witness.disabling(token: "dead", at: t0 + .milliseconds(10), waiter: 1) else {
            Issue.record("no check armed"); return
        }
        #expect(delay == .seconds(1))
        // Answered after the disabling answer, but sent before it: not a witness.
        #expect(witness.accepted(token: "good", began: t0 + .milliseconds(5)).map(\.0) == [])
        #expect(witness.waiting.map(\.waiter) == [1])
        // Sent after it: a witness.
        #expect(witness.accepted(token: "good", began: t0 + .milliseconds(11)).map(\.0) == [1])
        #expect(witness.waiting.isEmpty)
    }

    /// One check is armed for every answer that arrives meanwhile, and the next 200 to a later send witnesses them all
    /// (a healthy fleet's burst of churn).
    @Test func aBurstOfDeadTokens_oneCheck_theNextTwoHundredWitnessesAll() {
        var witness = Witness(wait: .seconds(1))
        guard case .check = witness.disabling(token: "dead-1", at: t0, waiter: 1) else { Issue.record("no check armed"); return }
        for index in 2...100 {
            guard case .wait = witness.disabling(token: "dead-\(index)", at: t0 + .milliseconds(2), waiter: index) else {
                Issue.record("a second check for \(index)"); return
            }
        }
        #expect(witness.accepted(token: "good-2", began: t0 + .milliseconds(50)).map(\.0) == Array(1...100))
        // The armed check finds nothing left to judge: no dry run.
        #expect(witness.checkDue(at: t0 + .seconds(1)) == nil)
    }

    /// No 200 within the wait: the dry run goes to known-good tokens, this process's first, never to a waiting token.
    @Test func witnesses_areKnownGoodTokens_notTheSuspects() {
        var witness = Witness()
        _ = witness.accepted(token: "phone-a", began: t0)
        _ = witness.disabling(token: "phone-b", at: t0 + .seconds(1), waiter: 1)
        let suspects = witness.checkDue(at: t0 + .seconds(2))
        #expect(suspects == ["phone-b"])
        #expect(witness.witnesses(known: ["phone-b", "phone-c", "phone-a"], suspects: suspects ?? []) == ["phone-a", "phone-c"])
    }

    /// The dry run's result decides for every answer waiting when its check took the suspects: accepted witnesses;
    /// refused is a project fault naming the answer, and while it lasts a disabling answer is checked at once; no
    /// known-good token is a new deployment's unwitnessed disable; no verdict retries.
    @Test func dryRunResult_decidesEveryWaitingAnswer() {
        var witness = Witness(wait: .seconds(2))
        _ = witness.disabling(token: "x1", at: t0, waiter: 1)
        _ = witness.disabling(token: "x2", at: t0, waiter: 2)
        #expect(witness.checkDue(at: t0 + .seconds(2)) == ["x1", "x2"])
        let first = witness.dryRunAnswered(.noKnownGoodToken)
        #expect(first.decided.map(\.1) == [.unwitnessed, .unwitnessed])
        #expect(!first.recheck)

        _ = witness.disabling(token: "x3", at: t0 + .seconds(3), waiter: 3)
        _ = witness.checkDue(at: t0 + .seconds(5))
        #expect(witness.dryRunAnswered(.refused(.senderIdMismatch)).decided.map(\.1) == [.projectFault(.senderIdMismatch)])
        guard case .check(let delay) = witness.disabling(token: "x4", at: t0 + .seconds(6), waiter: 4) else { Issue.record("no check"); return }
        #expect(delay == .zero)
        _ = witness.checkDue(at: t0 + .seconds(6))
        #expect(witness.dryRunAnswered(.inconclusive).decided.map(\.1) == [.retry])

        // FCM accepts the key again: the fault is forgotten; x5, which came while it stood, is sent again unjudged
        // (`anAnswerDuringAProjectFault_isNotWitnessedByTheHeal_itIsSentAgain`), and a later send's 200 witnesses.
        _ = witness.disabling(token: "x5", at: t0 + .seconds(7), waiter: 5)
        _ = witness.checkDue(at: t0 + .seconds(7))
        #expect(witness.dryRunAnswered(.accepted(token: "good")).decided.map(\.1) == [.retry])
        #expect(witness.fault == nil)
        _ = witness.disabling(token: "x6", at: t0 + .seconds(8), waiter: 6)
        #expect(witness.accepted(token: "good", began: t0 + .seconds(9)).map(\.1) == [.witnessed])
    }

    /// An answer that comes while the dry run is in flight is not judged by it (the dry run began before it came): it
    /// stays waiting, and another check is asked for.
    @Test func anAnswerDuringTheDryRun_waitsForAnotherCheck() {
        var witness = Witness(wait: .seconds(1))
        _ = witness.disabling(token: "x1", at: t0, waiter: 1)
        #expect(witness.checkDue(at: t0 + .seconds(1)) == ["x1"])
        guard case .wait = witness.disabling(token: "x2", at: t0 + .milliseconds(1100), waiter: 2) else { Issue.record("a second check"); return }
        let result = witness.dryRunAnswered(.accepted(token: "good"))
        #expect(result.decided.map(\.0) == [1])
        #expect(result.recheck)
        #expect(witness.waiting.map(\.waiter) == [2])
        #expect(witness.checkDue(at: t0 + .seconds(3)) == ["x2"])
    }

    /// The known-good tokens' answers, combined: one acceptance witnesses; a refusal counts only when every token
    /// refused; an answer without a verdict leaves it open.
    @Test func combine() {
        #expect(DryRunResult.combine([]) == .noKnownGoodToken)
        #expect(DryRunResult.combine([("a", .refused(.unregistered)), ("b", .accepted)]) == .accepted(token: "b"))
        #expect(DryRunResult.combine([("a", .refused(.notFound)), ("b", .refused(.unregistered))]) == .refused(.notFound))
        #expect(DryRunResult.combine([("a", .refused(.notFound)), ("b", .inconclusive)]) == .inconclusive)
    }

    /// A probe's NOT_FOUND that came while a project fault stood, then the project healed before the check's dry run (or
    /// a real 200) reached FCM: the acceptance says nothing of that token, so the send goes again, unjudged (before:
    /// witnessed, and a healthy phone disabled as the fault ended; seen once in CI's parallel run of the fleet's plain-404
    /// test). An answer that came before the fault was declared is judged as before.
    @Test func anAnswerDuringAProjectFault_isNotWitnessedByTheHeal_itIsSentAgain() {
        var witness = Witness(wait: .milliseconds(10))
        _ = witness.disabling(token: "first", at: t0, waiter: 1)
        _ = witness.checkDue(at: t0 + .milliseconds(10))
        #expect(witness.dryRunAnswered(.refused(.notFound)).decided.map(\.1) == [.projectFault(.notFound)])
        // The fault stands: a probe answers NOT_FOUND and is checked at once; the project heals before the dry run lands.
        guard case .check(let delay) = witness.disabling(token: "probe", at: t0 + .milliseconds(20), waiter: 2) else {
            Issue.record("no check armed"); return
        }
        #expect(delay == .zero)
        _ = witness.checkDue(at: t0 + .milliseconds(21))
        #expect(witness.dryRunAnswered(.accepted(token: "good")).decided.map(\.1) == [.retry])
        // The same by a real 200 that ends a fault.
        _ = witness.disabling(token: "x", at: t0 + .milliseconds(30), waiter: 3)
        _ = witness.checkDue(at: t0 + .milliseconds(40))
        _ = witness.dryRunAnswered(.refused(.notFound))
        _ = witness.disabling(token: "probe-2", at: t0 + .milliseconds(50), waiter: 4)
        #expect(witness.accepted(token: "good", began: t0 + .milliseconds(60)).map(\.1) == [.retry])
        // Healed: an answer now is witnessed as ever.
        _ = witness.disabling(token: "dead", at: t0 + .milliseconds(70), waiter: 5)
        #expect(witness.accepted(token: "good", began: t0 + .milliseconds(80)).map(\.1) == [.witnessed])
    }

    /// At stop, every waiting answer is given back.
    @Test func drain_givesBackEveryWaitingAnswer() {
        var witness = Witness()
        _ = witness.disabling(token: "x1", at: t0, waiter: 1)
        _ = witness.disabling(token: "x2", at: t0, waiter: 2)
        #expect(witness.drain() == [1, 2])
        #expect(witness.waiting.isEmpty)
    }
}
