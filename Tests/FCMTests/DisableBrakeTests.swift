import FCM
import Testing

/// The disable brake as a value: sequences of answers in, verdicts out (no clock, no network). Every answer that would
/// disable a device counts alike, in any mix (SPEC §3 "The same holds for every answer that would disable a device").
@Suite("Disable brake")
struct DisableBrakeTests {
    typealias Verdict = DisableBrake.Verdict
    typealias Answer = DisableBrake.Answer

    /// One answer of a simulated fleet: a device and whether it answered healthy or with a disabling answer.
    enum Step {
        case healthy(String)
        case disabling(Answer, String)
        static func mismatch(_ token: String) -> Step { .disabling(.senderIdMismatch, token) }
    }

    /// Feeds `steps` to `brake`; returns the judgement of each disabling answer, in order.
    static func judge(_ steps: [Step], on brake: inout DisableBrake) -> [DisableBrake.Judgement] {
        var judgements: [DisableBrake.Judgement] = []
        for step in steps {
            switch step {
            case .healthy(let token): brake.healthy(device: DisableBrake.device(token))
            case .disabling(let answer, let token): judgements.append(brake.disabling(answer, device: DisableBrake.device(token)))
            }
        }
        return judgements
    }

    static func run(_ steps: [Step], on brake: inout DisableBrake) -> [Verdict] { judge(steps, on: &brake).map(\.verdict) }

    static func run(_ steps: [Step]) -> [Verdict] {
        var brake = DisableBrake()
        return run(steps, on: &brake)
    }

    static func healthy(_ range: Range<Int>, prefix: String = "good") -> [Step] { range.map { .healthy("\(prefix)-\($0)") } }
    static func mismatch(_ range: Range<Int>, prefix: String = "fleet") -> [Step] { disabling(.senderIdMismatch, range, prefix: prefix) }
    static func disabling(_ answer: Answer, _ range: Range<Int>, prefix: String = "fleet") -> [Step] {
        range.map { .disabling(answer, "\(prefix)-\($0)") }
    }

    @Test(arguments: [
        (1, 0, Verdict.undecided), (2, 0, .undecided), (3, 0, .projectFault), (20, 0, .projectFault),
        (1, 1, .disable), (1, 2, .disable), (2, 1, .undecided), (2, 2, .disable), (1, 3, .disable), (3, 3, .disable),
        (4, 3, .projectFault), (10, 10, .disable), (11, 9, .projectFault), (1, 19, .disable),
    ])
    func verdict_byMismatchesAndHealthy(mismatches: Int, healthy: Int, expected: Verdict) {
        #expect(DisableBrake.verdict(disabling: mismatches, healthy: healthy) == expected)
    }

    /// A wrong key from the first send: nothing disabled, a project fault from the third device on.
    @Test func allMismatchFleet_fromColdStart_disablesNothing_faultsFromTheThird() {
        let verdicts = Self.run(Self.mismatch(0..<120))
        #expect(verdicts.count { $0 == .disable } == 0)
        #expect(Array(verdicts.prefix(3)) == [.undecided, .undecided, .projectFault])
        #expect(verdicts.dropFirst(2).allSatisfy { $0 == .projectFault })
    }

    /// One stale token among healthy sends is disabled at once, once any device answered healthy (a small deployment
    /// has one healthy phone); before that it is retried.
    @Test func oneStaleToken_amongHealthySends_isDisabledOnceADeviceIsHealthy() {
        #expect(Self.run(Self.healthy(0..<20) + [.mismatch("stale")]) == [.disable])
        #expect(Self.run(Self.healthy(0..<1) + [.mismatch("stale")]) == [.disable])
        #expect(Self.run([.mismatch("stale")]) == [.undecided])
        // Retried after a healthy answer: disabled then.
        #expect(Self.run([.mismatch("stale")] + Self.healthy(0..<1) + [.mismatch("stale")]) == [.undecided, .disable])
        // Two dead tokens and one healthy phone: the second waits for more evidence.
        #expect(Self.run(Self.healthy(0..<1) + [.mismatch("a"), .mismatch("b")]) == [.disable, .undecided])
    }

    /// Stale tokens trickling in among healthy traffic (one in five answers) are each disabled.
    @Test func slowTrickleOfStaleTokens_amongHealthyTraffic_eachDisabled() {
        var steps: [Step] = []
        for index in 0..<200 {
            steps.append(index % 5 == 4 ? .mismatch("stale-\(index)") : .healthy("good-\(index % 40)"))
        }
        let verdicts = Self.run(steps)
        #expect(verdicts.count == 40)
        #expect(verdicts.allSatisfy { $0 == .disable })
    }

    /// After a healthy history a wrong key disables at most 10 devices (the window is 20), then it is a project fault.
    @Test func twentyHealthyThenAllMismatch_disablesAtMostTen_thenFaults() {
        let verdicts = Self.run(Self.healthy(0..<20) + Self.mismatch(0..<100))
        #expect(verdicts.count { $0 == .disable } == 10)
        #expect(Array(verdicts.prefix(10)) == Array(repeating: .disable, count: 10))
        #expect(verdicts.dropFirst(10).allSatisfy { $0 == .projectFault })
        // Whatever the healthy history, never more than 10.
        let long = Self.run(Self.healthy(0..<1000) + Self.mismatch(0..<1000))
        #expect(long.count { $0 == .disable } == 10)
    }

    /// A device answering again replaces its own entry: one device cannot outvote the fleet.
    @Test func fullAndHealthy_onlyWhenTwentyDistinctDevicesAnsweredHealthy_andNoMismatchRemains() {
        var brake = DisableBrake()
        for device in 0..<19 { brake.healthy(device: device) }
        #expect(!brake.isFullAndHealthy)  // 19 devices
        brake.healthy(device: 5)
        #expect(!brake.isFullAndHealthy)  // the same device again
        brake.healthy(device: 19)
        #expect(brake.isFullAndHealthy)
        _ = brake.disabling(.senderIdMismatch, device: 100)
        #expect(!brake.isFullAndHealthy)  // a mismatch in the window: healthy answers must be recorded again
        brake.healthy(device: 100)
        #expect(brake.isFullAndHealthy)
    }

    @Test func oneDeviceAnsweringAgain_countsOnce() {
        #expect(Self.run(Array(repeating: .mismatch("same"), count: 10)).allSatisfy { $0 == .undecided })
        var brake = DisableBrake()
        _ = Self.run(Self.healthy(0..<3) + Array(repeating: .healthy("good-0"), count: 30), on: &brake)
        #expect(brake.counts == (0, 3))
    }

    /// After the probe succeeds (`recovered`), the episode's mismatches are forgotten: with fresh healthy answers a
    /// single stale token is disabled again; without `recovered` the stale entries would still call it a fault.
    @Test func recovery_forgetsTheEpisode_andAStaleTokenIsDisabledAgain() {
        var brake = DisableBrake()
        #expect(Self.run(Self.mismatch(0..<20), on: &brake).last == .projectFault)
        var stale = brake
        #expect(Self.run(Self.healthy(0..<3) + [.mismatch("stale")], on: &stale) == [.projectFault])

        brake.recovered()
        #expect(brake.counts == (0, 0))
        #expect(Self.run(Self.healthy(0..<3) + [.mismatch("stale")], on: &brake) == [.disable])
    }

    // MARK: Every disabling answer

    /// Google's plain 404 NOT_FOUND from every device after a healthy start (a deleted project, a rewritten path): at
    /// most 10 disabled, then a project fault naming NOT_FOUND; the brake vouches only for the first two.
    @Test func twentyHealthyThenAllPlainNotFound_disablesAtMostTen_faultsNamingNotFound() {
        var brake = DisableBrake()
        let judgements = Self.judge(Self.healthy(0..<20) + Self.disabling(.notFound, 0..<100), on: &brake)
        #expect(judgements.count { $0.verdict == .disable } == 10)
        #expect(judgements.prefix(10).allSatisfy { $0.verdict == .disable })
        #expect(judgements.dropFirst(10).allSatisfy { $0 == DisableBrake.Judgement(.projectFault, dominant: .notFound) })
        #expect(judgements.map(\.vouched) == [true, true] + Array(repeating: false, count: 98))
        // From a cold start: nothing disabled at all.
        let cold = Self.run(Self.disabling(.notFound, 0..<120))
        #expect(cold.count { $0 == .disable } == 0)
        #expect(cold.dropFirst(2).allSatisfy { $0 == .projectFault })
    }

    /// Any mix of disabling answers counts together: four kinds in turn after a healthy start disable at most 10, and
    /// the fault names the most frequent one.
    @Test func mixOfDisablingAnswers_countsTogether_andNamesTheMostFrequent() {
        let kinds: [Answer] = [.notFound, .unregistered, .notFound, .invalidToken, .senderIdMismatch, .notFound]
        var steps = Self.healthy(0..<20)
        for index in 0..<120 { steps.append(.disabling(kinds[index % kinds.count], "fleet-\(index)")) }
        var brake = DisableBrake()
        let judgements = Self.judge(steps, on: &brake)
        #expect(judgements.count { $0.verdict == .disable } == 10)
        #expect(judgements.dropFirst(10).allSatisfy { $0.verdict == .projectFault && $0.dominant == .notFound })
        // Half healthy, half mixed disabling answers, alternating: never a majority, but never vouched for either.
        var half = DisableBrake()
        var alternating = Self.healthy(0..<20)
        for index in 0..<200 {
            alternating.append(index % 2 == 0 ? .healthy("good-\(index)") : .disabling(kinds[index % kinds.count], "fleet-\(index)"))
        }
        let mixed = Self.judge(alternating, on: &half)
        #expect(mixed.dropFirst(10).allSatisfy { $0.verdict == .disable && !$0.vouched })
    }

    /// A healthy fleet's trickle of dead tokens, of every kind, is disabled at once and vouched for.
    @Test func trickleOfDeadTokens_ofEveryKind_disabledAndVouched() {
        var steps = Self.healthy(0..<20)
        for index in 0..<400 {
            steps.append(index % 20 == 19 ? .disabling(Answer.allCases[index / 20 % 4], "stale-\(index)") : .healthy("good-\(index % 60)"))
        }
        var brake = DisableBrake()
        let judgements = Self.judge(steps, on: &brake)
        #expect(judgements.count == 20)
        #expect(judgements.allSatisfy { $0.verdict == .disable && $0.vouched })
    }

    @Test func dominant_isTheMostFrequent_newestOnATie() {
        var brake = DisableBrake()
        #expect(brake.dominant == nil)
        _ = Self.judge([.disabling(.unregistered, "a"), .disabling(.notFound, "b")], on: &brake)
        #expect(brake.dominant == .notFound)
        _ = Self.judge([.disabling(.unregistered, "c")], on: &brake)
        #expect(brake.dominant == .unregistered)
    }
}
