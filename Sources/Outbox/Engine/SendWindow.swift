/// How many sends may be on the wire, from FCM's answer time (SPEC §3, "FCM's answer time"; docs/operations.md,
/// "The window on the wire"). Little's law: the sends on the wire are the rate times the answer time, so at 50 ms the
/// 10,000/s of FCM's default quota needs 500 while a loopback stand-in needs a few dozen. The window starts at its
/// maximum (`MAX_IN_FLIGHT` ÷ 2) and is judged about twice per round trip, on the mean answer time since it was last
/// judged: when that mean is longer than the usual answer time (the mean of the last 10 s period) by more than a
/// tolerance (half of it, at least 10 ms), the answer time is rising, which is FCM (or the path) asking for less, and
/// the window shrinks by a quarter; when it is not, and sends were waiting for the window, it grows by an eighth. The
/// mean of half a window's answers, not a running average of the last few: a handful of slow answers harvested
/// together (a busy moment on this machine) is not a server asking for less. The usual answer time, not the fastest
/// one: an answer time here is FCM's plus this process's own turns (libcurl 7.88 timed 25.5 ms for a 20 ms FCM at 250
/// on the wire), and measured against the fastest answer, which saw none of them, a steady 20 ms FCM read as
/// queueing: the window swung between 28 and 531 and the drain ran at 4,900–10,800/s, against 12,800–13,300/s held
/// open. A steady answer time, however long, keeps the window as wide as the work needs. (The shape of Netflix's
/// Gradient limiter, which compares the short-term answer time with the long-term one, without its smoothing
/// constants to tune.)
///
/// A value: `EngineLoop` owns it, feeds it each answer's time and applies the window to the machine.
struct SendWindow: Sendable {
    let maximum: Int
    let minimum: Int
    /// The window now.
    private(set) var limit: Int
    /// The judged answers of the current period (their total time and count), and the mean of the last whole period:
    /// the usual answer time follows FCM when its distance changes for good.
    private var usual: (total: Duration, count: Int, previousMean: Duration?) = (.zero, 0, nil)
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

    /// The usual answer time: the mean of the last whole period, or of this one until a period has passed.
    var baseline: Duration { usual.previousMean ?? usual.total / max(1, usual.count) }

    /// An answer came `answerTime` after its send started. `waiting`: sends were queued behind the window. Returns the
    /// new window when it changed.
    mutating func answered(after answerTime: Duration, at now: ContinuousClock.Instant, waiting: Bool) -> Int? {
        if let start = periodStart, now - start >= Self.period {
            if usual.count > 0 { usual.previousMean = usual.total / usual.count }
            usual.total = .zero
            usual.count = 0
            periodStart = now
        } else if periodStart == nil {
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
        usual.total += answerTime
        usual.count += 1
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
