import FoundationEssentials
import Synchronization

/// Heartbeats of the daemon's loops. `/healthz` and the systemd watchdog consult it: a loop
/// that stops beating (stuck) stops the watchdog pings, so systemd restarts the process.
public final class Liveness: Sendable {
    private let beats = Mutex<[String: ContinuousClock.Instant]>([:])
    /// How long a loop may go without beating before it counts as stuck.
    public let stallAfter: Duration

    public init(stallAfter: Duration) { self.stallAfter = stallAfter }

    /// Records progress of `loop`.
    public func beat(_ loop: String) { beats.withLock { $0[loop] = .now } }

    /// Loops whose last beat is older than `stallAfter` (empty when all are alive).
    public func stalled() -> [String] {
        let now = ContinuousClock.now
        return beats.withLock { $0.filter { now - $0.value > stallAfter }.map(\.key).sorted() }
    }
}
