@testable import FCM
import Push
import Testing

/// The witness rule as a value: no network, no database, every instant given (SPEC §3, "a disable needs a witness").
@Suite("Disable witness")
struct DisableWitnessTests {
    typealias Witness = DisableWitness<Int>
    let t0 = ContinuousClock.now

    /// A 200 answered after a send began witnesses its disabling answer at once: no wait, no dry run.
    @Test func aTwoHundredAfterTheSendBegan_witnessesAtOnce() {
        var witness = Witness()
        _ = witness.accepted(token: "good", at: t0 + .milliseconds(5))
        guard case .decided(.witnessed) = witness.disabling(token: "dead", started: t0, waiter: 1) else { Issue.record("not witnessed"); return }
        #expect(witness.waiting.isEmpty)
    }

    /// A 200 from before the send began says nothing about it: the answer waits, one check is armed for all that
    /// arrive meanwhile, and the next 200 witnesses every one of them (a healthy fleet's burst of churn).
    @Test func anOlderTwoHundred_waits_andTheNextWitnessesAllWaiting() {
        var witness = Witness(wait: .seconds(1))
        _ = witness.accepted(token: "good", at: t0)
        guard case .check(let delay) = witness.disabling(token: "dead-1", started: t0 + .milliseconds(1), waiter: 1) else {
            Issue.record("no check armed"); return
        }
        #expect(delay == .seconds(1))
        for index in 2...100 {
            guard case .wait = witness.disabling(token: "dead-\(index)", started: t0 + .milliseconds(2), waiter: index) else {
                Issue.record("a second check for \(index)"); return
            }
        }
        #expect(witness.accepted(token: "good-2", at: t0 + .milliseconds(50)) == Array(1...100))
        // The armed check finds nothing left to judge: no dry run.
        #expect(witness.checkDue() == nil)
    }

    /// No 200 within the wait: the dry run goes to known-good tokens, this process's first, never to a waiting token.
    @Test func witnesses_areKnownGoodTokens_notTheSuspects() {
        var witness = Witness()
        _ = witness.accepted(token: "phone-a", at: t0)
        _ = witness.disabling(token: "phone-b", started: t0 + .seconds(1), waiter: 1)
        let suspects = witness.checkDue()
        #expect(suspects == ["phone-b"])
        #expect(witness.witnesses(known: ["phone-b", "phone-c", "phone-a"], suspects: suspects ?? []) == ["phone-a", "phone-c"])
    }

    /// The dry run's result decides for every answer waiting: accepted witnesses; refused is a project fault naming the
    /// answer, and while it lasts a disabling answer is checked at once; no known-good token is a new deployment's
    /// unwitnessed disable; no verdict retries.
    @Test func dryRunResult_decidesEveryWaitingAnswer() {
        var witness = Witness(wait: .seconds(2))
        _ = witness.disabling(token: "x1", started: t0, waiter: 1)
        _ = witness.disabling(token: "x2", started: t0, waiter: 2)
        #expect(witness.checkDue() == ["x1", "x2"])
        #expect(witness.dryRunAnswered(.noKnownGoodToken, at: t0).map(\.1) == [.unwitnessed, .unwitnessed])

        _ = witness.disabling(token: "x3", started: t0, waiter: 3)
        _ = witness.checkDue()
        #expect(witness.dryRunAnswered(.refused(.senderIdMismatch), at: t0).map(\.1) == [.projectFault(.senderIdMismatch)])
        guard case .check(let delay) = witness.disabling(token: "x4", started: t0, waiter: 4) else { Issue.record("no check"); return }
        #expect(delay == .zero)
        _ = witness.checkDue()
        #expect(witness.dryRunAnswered(.inconclusive, at: t0).map(\.1) == [.retry])

        // FCM accepts the key again: the fault is forgotten, dead tokens are witnessed at once.
        _ = witness.disabling(token: "x5", started: t0, waiter: 5)
        _ = witness.checkDue()
        #expect(witness.dryRunAnswered(.accepted(token: "good"), at: t0 + .seconds(1)).map(\.1) == [.witnessed])
        #expect(witness.fault == nil)
        guard case .decided(.witnessed) = witness.disabling(token: "x6", started: t0 + .milliseconds(500), waiter: 6) else {
            Issue.record("not witnessed after the dry run's 200"); return
        }
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
        _ = witness.disabling(token: "x1", started: t0, waiter: 1)
        _ = witness.disabling(token: "x2", started: t0, waiter: 2)
        #expect(witness.drain() == [1, 2])
        #expect(witness.waiting.isEmpty)
    }
}
