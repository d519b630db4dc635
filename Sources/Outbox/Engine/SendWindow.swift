/// How many sends may be on the wire, from FCM's answer time (SPEC §3, "FCM's answer time"; docs/operations.md,
/// "The window on the wire"). Little's law: the sends on the wire are the rate times the answer time, so at 50 ms the
/// 10,000/s of FCM's default quota needs 500 while a loopback stand-in needs a few dozen. The window starts at its
/// maximum (`MAX_IN_FLIGHT` ÷ 2) and is judged about twice per round trip, on the mean answer time since it was last
/// judged: when that mean is longer than the fastest recent answer by more than a tolerance (half that answer time, at
/// least 10 ms), the extra is queueing (in FCM, on the path, or in this process) and the window shrinks by a quarter;
/// when it is not, and sends were waiting for the window, it grows by an eighth. The mean of half a window's answers,
/// not a running average of the last few: a handful of slow answers harvested together (a busy moment on this machine)
/// is not a server asking for less. A rising answer time is FCM asking for less, and is heard as such; a steady one,
/// however long, keeps the window as wide as the work needs. (The shape of TCP Vegas and of Netflix's Gradient
/// limiter, without their smoothing constants to tune.)
///
/// A value: `EngineLoop` owns it, feeds it each answer's time and applies the window to the machine.
struct SendWindow: Sendable {
    let maximum: Int
    let minimum: Int
    /// The window now.
    private(set) var limit: Int
    /// The fastest answer of the current and the previous period: what FCM's answer time is without queueing. Two
    /// periods, so that it follows FCM when its distance changes for good.
    private var fastest: (current: Duration, previous: Duration) = (.seconds(3600), .seconds(3600))
    private var periodStart: ContinuousClock.Instant?
    /// The first round trip (a window's worth of answers) is not judged: its answers carry the connections' handshakes
    /// and the first burst, which say nothing about FCM. Measured at a 50 ms answer time: their mean was 108 ms against
    /// 55 ms after, and judging them cost the drain its first second at half the window.
    private var warmingUp = true
    /// The answers since the window was last judged, and their total answer time.
    private var answersSinceJudged = 0
    private var answerTimeSinceJudged: Duration = .zero

    static let period: Duration = .seconds(10)
    static let minimumTolerance: Duration = .milliseconds(10)

    init(maximum: Int, minimum: Int = 16) {
        self.maximum = max(1, maximum)
        self.minimum = min(self.maximum, max(1, minimum))
        limit = self.maximum
    }

    /// The fastest answer time seen lately.
    var baseline: Duration { min(fastest.current, fastest.previous) }

    /// An answer came `answerTime` after its send started. `waiting`: sends were queued behind the window. Returns the
    /// new window when it changed.
    mutating func answered(after answerTime: Duration, at now: ContinuousClock.Instant, waiting: Bool) -> Int? {
        if let start = periodStart, now - start < Self.period {
            fastest.current = min(fastest.current, answerTime)
        } else {
            fastest = (answerTime, periodStart == nil ? answerTime : fastest.current)
            periodStart = now
        }
        answersSinceJudged += 1
        answerTimeSinceJudged += answerTime
        if warmingUp {
            guard answersSinceJudged >= maximum else { return nil }
            warmingUp = false
            answersSinceJudged = 0
            answerTimeSinceJudged = .zero
            return nil
        }
        guard answersSinceJudged >= max(1, limit / 2) else { return nil }
        let mean = answerTimeSinceJudged / answersSinceJudged
        answersSinceJudged = 0
        answerTimeSinceJudged = .zero
        let tolerance = max(baseline / 2, Self.minimumTolerance)
        let before = limit
        if mean - baseline > tolerance {
            limit = max(minimum, limit * 3 / 4)
        } else if waiting {
            limit = min(maximum, limit + max(1, limit / 8))
        }
        return limit == before ? nil : limit
    }
}
