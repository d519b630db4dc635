import FCM
import Testing

/// The wrong-key brake as a value: sequences of answers in, verdicts out (no clock, no network).
@Suite("SENDER_ID_MISMATCH brake")
struct SenderMismatchBrakeTests {
    typealias Verdict = SenderMismatchBrake.Verdict

    /// One answer of a simulated fleet: a device and whether it answered SENDER_ID_MISMATCH.
    enum Step {
        case healthy(String)
        case mismatch(String)
    }

    /// Feeds `steps` to `brake`; returns the verdict of each mismatch, in order.
    static func run(_ steps: [Step], on brake: inout SenderMismatchBrake) -> [Verdict] {
        var verdicts: [Verdict] = []
        for step in steps {
            switch step {
            case .healthy(let token): brake.healthy(device: SenderMismatchBrake.device(token))
            case .mismatch(let token): verdicts.append(brake.mismatch(device: SenderMismatchBrake.device(token)))
            }
        }
        return verdicts
    }

    static func run(_ steps: [Step]) -> [Verdict] {
        var brake = SenderMismatchBrake()
        return run(steps, on: &brake)
    }

    static func healthy(_ range: Range<Int>, prefix: String = "good") -> [Step] { range.map { .healthy("\(prefix)-\($0)") } }
    static func mismatch(_ range: Range<Int>, prefix: String = "fleet") -> [Step] { range.map { .mismatch("\(prefix)-\($0)") } }

    @Test(arguments: [
        (1, 0, Verdict.undecided), (2, 0, .undecided), (3, 0, .projectFault), (20, 0, .projectFault),
        (1, 1, .undecided), (1, 2, .undecided), (2, 2, .undecided), (1, 3, .disable), (3, 3, .disable),
        (4, 3, .projectFault), (10, 10, .disable), (11, 9, .projectFault), (1, 19, .disable),
    ])
    func verdict_byMismatchesAndHealthy(mismatches: Int, healthy: Int, expected: Verdict) {
        #expect(SenderMismatchBrake.verdict(mismatches: mismatches, healthy: healthy) == expected)
    }

    /// A wrong key from the first send: nothing disabled, a project fault from the third device on.
    @Test func allMismatchFleet_fromColdStart_disablesNothing_faultsFromTheThird() {
        let verdicts = Self.run(Self.mismatch(0..<120))
        #expect(verdicts.count { $0 == .disable } == 0)
        #expect(Array(verdicts.prefix(3)) == [.undecided, .undecided, .projectFault])
        #expect(verdicts.dropFirst(2).allSatisfy { $0 == .projectFault })
    }

    /// One stale token among healthy sends is disabled at once when 3+ devices answered healthy, else retried.
    @Test func oneStaleToken_amongHealthySends_isDisabledOnceThreeAreHealthy() {
        #expect(Self.run(Self.healthy(0..<20) + [.mismatch("stale")]) == [.disable])
        #expect(Self.run(Self.healthy(0..<3) + [.mismatch("stale")]) == [.disable])
        #expect(Self.run(Self.healthy(0..<2) + [.mismatch("stale")]) == [.undecided])
        // Retried after more healthy answers: disabled then.
        #expect(Self.run([.mismatch("stale")] + Self.healthy(0..<3) + [.mismatch("stale")]) == [.undecided, .disable])
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
        var brake = SenderMismatchBrake()
        for device in 0..<19 { brake.healthy(device: device) }
        #expect(!brake.isFullAndHealthy)  // 19 devices
        brake.healthy(device: 5)
        #expect(!brake.isFullAndHealthy)  // the same device again
        brake.healthy(device: 19)
        #expect(brake.isFullAndHealthy)
        _ = brake.mismatch(device: 100)
        #expect(!brake.isFullAndHealthy)  // a mismatch in the window: healthy answers must be recorded again
        brake.healthy(device: 100)
        #expect(brake.isFullAndHealthy)
    }

    @Test func oneDeviceAnsweringAgain_countsOnce() {
        #expect(Self.run(Array(repeating: .mismatch("same"), count: 10)).allSatisfy { $0 == .undecided })
        var brake = SenderMismatchBrake()
        _ = Self.run(Self.healthy(0..<3) + Array(repeating: .healthy("good-0"), count: 30), on: &brake)
        #expect(brake.counts == (0, 3))
    }

    /// After the probe succeeds (`recovered`), the episode's mismatches are forgotten: with fresh healthy answers a
    /// single stale token is disabled again; without `recovered` the stale entries would still call it a fault.
    @Test func recovery_forgetsTheEpisode_andAStaleTokenIsDisabledAgain() {
        var brake = SenderMismatchBrake()
        #expect(Self.run(Self.mismatch(0..<20), on: &brake).last == .projectFault)
        var stale = brake
        #expect(Self.run(Self.healthy(0..<3) + [.mismatch("stale")], on: &stale) == [.projectFault])

        brake.recovered()
        #expect(brake.counts == (0, 0))
        #expect(Self.run(Self.healthy(0..<3) + [.mismatch("stale")], on: &brake) == [.disable])
    }
}
