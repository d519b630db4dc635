@testable import Outbox
import Testing

/// The window on the wire from FCM's answer time (SPEC §3, "FCM's answer time"): no clock, every instant given.
@Suite("Send window")
struct SendWindowTests {
    /// Feeds `count` answers of `answerTime`, `perSecond` a second from `start`; returns the window after each.
    static func feed(_ window: inout SendWindow, _ count: Int, answerTime: (Int) -> Duration, perSecond: Int,
                     from start: ContinuousClock.Instant, waiting: Bool = true) -> [Int] {
        (0..<count).map { index in
            _ = window.answered(after: answerTime(window.limit), at: start + .seconds(Double(index) / Double(perSecond)), waiting: waiting)
            return window.limit
        }
    }

    /// FCM answering in a steady 50 ms, however far away that is: the window stays as wide as it may be (500 on the
    /// wire: 10,000/s by Little's law).
    @Test func aSteadyAnswerTime_keepsTheWindowWide() {
        var window = SendWindow(maximum: 500)
        let limits = Self.feed(&window, 50_000, answerTime: { _ in .milliseconds(50) }, perSecond: 10_000, from: .now)
        #expect(limits.allSatisfy { $0 == 500 })
    }

    /// A steady FCM whose answers are harvested in clumps: every fiftieth answer starts ten that waited 120 ms (a busy
    /// moment on this machine; the mean stays 64 ms against a 50 ms baseline). The window judges the mean of the answers
    /// since it last judged, so it stays wide; a running average of the last few would have read a clump's end as FCM
    /// slowing down.
    @Test func slowAnswersInClumps_doNotShrinkTheWindow() {
        var window = SendWindow(maximum: 500)
        var index = 0
        let limits = Self.feed(&window, 50_000, answerTime: { _ in
            defer { index += 1 }
            return index % 50 >= 40 ? .milliseconds(120) : .milliseconds(50)
        }, perSecond: 10_000, from: .now)
        #expect(limits.allSatisfy { $0 == 500 }, "narrowest: \(limits.min()!)")
    }

    /// The first round trip's answers carry the connections' handshakes and the first burst (measured at a 50 ms FCM:
    /// 108 ms on average, then 55 ms): they are not judged, so the drain does not start at half its window.
    @Test func aSlowFirstRoundTrip_isNotJudged() {
        var window = SendWindow(maximum: 500)
        let start = ContinuousClock.now
        let first = Self.feed(&window, 500, answerTime: { _ in .milliseconds(108) }, perSecond: 5_000, from: start)
        let after = Self.feed(&window, 20_000, answerTime: { _ in .milliseconds(55) }, perSecond: 9_000, from: start + .milliseconds(100))
        #expect((first + after).allSatisfy { $0 == 500 }, "narrowest: \((first + after).min()!)")
        // A second slow round trip is heard.
        let slow = Self.feed(&window, 1_000, answerTime: { _ in .milliseconds(108) }, perSecond: 5_000, from: start + .seconds(3))
        #expect(slow.min()! < 500)
    }

    /// FCM's answer time doubles mid-drain (20 ms, then 40 ms): the window shrinks, and grows back once FCM's new
    /// distance is the baseline (the fastest answer of the last two periods) and sends are waiting.
    @Test func anAnswerTimeThatDoubles_shrinksTheWindow_thenItRecovers() {
        var window = SendWindow(maximum: 500)
        let start = ContinuousClock.now
        _ = Self.feed(&window, 20_000, answerTime: { _ in .milliseconds(20) }, perSecond: 10_000, from: start)
        #expect(window.limit == 500)
        let slow = Self.feed(&window, 5_000, answerTime: { _ in .milliseconds(40) }, perSecond: 5_000, from: start + .seconds(2))
        #expect(slow.min()! < 250)
        #expect(slow.min()! >= window.minimum)
        // Twenty seconds later 40 ms is the fastest answer of both periods: no longer queueing, the window widens.
        _ = Self.feed(&window, 30 * 2_000, answerTime: { _ in .milliseconds(40) }, perSecond: 2_000, from: start + .seconds(3))
        #expect(window.limit == 500)
    }

    /// A steady 20 ms FCM, and this process's own turns adding 0–15 ms to each answer, in stretches (libcurl 7.88 timed
    /// 25.5 ms on average for a 20 ms FCM at 250 on the wire; the engine saw 26–31 ms from one half-second to the next).
    /// Nothing is rising, so the window stays as wide as it may be. Measured against the fastest answer (20 ms, one
    /// that met no turn) the stretches read as queueing and the window swung between 28 and 531, with the drain at
    /// 4,900–10,800/s against 12,800–13,300/s held open.
    @Test func aSteadyFCM_withThisProcesssOwnTurnsInTheAnswerTime_keepsTheWindowWide() {
        var window = SendWindow(maximum: 500)
        var index = 0
        let limits = Self.feed(&window, 100_000, answerTime: { _ in
            defer { index += 1 }
            if index % 50 == 0 { return .milliseconds(20) }
            // Stretches of 250 answers whose turns add 4, 6, … 14 ms.
            return .milliseconds(20) + .milliseconds(4 + 2 * ((index / 250) % 6))
        }, perSecond: 10_000, from: .now)
        #expect(limits.allSatisfy { $0 == 500 }, "narrowest: \(limits.min()!)")
    }

    /// On loopback the answer time is this process's own queue (Little's law at the CPU's limit: 13,000/s whatever the
    /// window), steady while the window is: nothing asks for less, and the window stays wide. Held open on loopback
    /// the drain ran as fast as with the window it had settled at before (16,349, 16,061 and 15,028/s against 15,429,
    /// 14,543 and 16,746, alternated); `MAX_IN_FLIGHT` bounds it.
    @Test func onLoopback_theProcesssOwnSteadyQueue_doesNotShrinkTheWindow() {
        var window = SendWindow(maximum: 500)
        let start = ContinuousClock.now
        _ = Self.feed(&window, 200, answerTime: { _ in .microseconds(500) }, perSecond: 13_000, from: start)
        let limits = Self.feed(&window, 400_000, answerTime: { limit in .microseconds(500) + .seconds(Double(limit) / 13_000) },
                               perSecond: 13_000, from: start + .milliseconds(20))
        #expect(limits.suffix(200_000).allSatisfy { $0 == 500 }, "narrowest: \(limits.suffix(200_000).min()!)")
    }

    /// Nothing waits for the window (a trickle): it never grows past where it is, and a quiet FCM never shrinks it.
    @Test func withoutWaitingSends_theWindowDoesNotGrow() {
        var window = SendWindow(maximum: 400, minimum: 16)
        let start = ContinuousClock.now
        _ = Self.feed(&window, 1_000, answerTime: { _ in .milliseconds(30) }, perSecond: 1_000, from: start)
        _ = Self.feed(&window, 1_000, answerTime: { _ in .milliseconds(300) }, perSecond: 1_000, from: start + .seconds(1))
        let shrunk = window.limit
        #expect(shrunk < 400)
        _ = Self.feed(&window, 1_000, answerTime: { _ in .milliseconds(30) }, perSecond: 1_000, from: start + .seconds(2), waiting: false)
        #expect(window.limit == shrunk)
    }
}
