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
        #expect(witness.accepted(token: "good", began: t0 + .milliseconds(5)) == [])
        #expect(witness.waiting.map(\.waiter) == [1])
        // Sent after it: a witness.
        #expect(witness.accepted(token: "good", began: t0 + .milliseconds(11)) == [1])
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
        #expect(witness.accepted(token: "good-2", began: t0 + .milliseconds(50)) == Array(1...100))
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

        // FCM accepts the key again: the fault is forgotten, and a later send's 200 witnesses.
        _ = witness.disabling(token: "x5", at: t0 + .seconds(7), waiter: 5)
        _ = witness.checkDue(at: t0 + .seconds(7))
        #expect(witness.dryRunAnswered(.accepted(token: "good")).decided.map(\.1) == [.witnessed])
        #expect(witness.fault == nil)
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

    /// At stop, every waiting answer is given back.
    @Test func drain_givesBackEveryWaitingAnswer() {
        var witness = Witness()
        _ = witness.disabling(token: "x1", at: t0, waiter: 1)
        _ = witness.disabling(token: "x2", at: t0, waiter: 2)
        #expect(witness.drain() == [1, 2])
        #expect(witness.waiting.isEmpty)
    }
}
