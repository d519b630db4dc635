import Dispatch
import FoundationEssentials
import Synchronization
import Threads
import Timekeeping

/// Keeps one connection LISTENing on a channel from a dedicated thread and calls `onWake`
/// for each batch of notifications. The connection is health-checked while idle and
/// re-established after a drop; `onWake` is also called after every (re)connect, since
/// notifications sent while it was down are lost.
public final class PostgresListener: Sendable {
    private let conninfo: String
    private let channel: String
    private let healthCheckInterval: Duration
    private let onWake: @Sendable () -> Void
    private let onError: @Sendable (PostgresError) -> Void
    /// Whether `stop()` was called, and whether the thread was started.
    private let state = Mutex<(stopped: Bool, started: Bool)>((false, false))
    private let finished = DispatchSemaphore(value: 0)
    /// Signalled by `stop()`: ends a reconnect backoff at once instead of at its next check.
    private let stopping = DispatchSemaphore(value: 0)

    /// Prepares a listener; call `start()` to begin.
    public init(conninfo: String, channel: String, healthCheckInterval: Duration = .seconds(15),
                onWake: @escaping @Sendable () -> Void, onError: @escaping @Sendable (PostgresError) -> Void = { _ in }) {
        self.conninfo = conninfo
        self.channel = channel
        self.healthCheckInterval = healthCheckInterval
        self.onWake = onWake
        self.onError = onError
    }

    /// Starts the listening thread.
    public func start() {
        state.withLock { $0.started = true }
        OSThread.start(name: "postgres-listen") { [self] in loop(); finished.signal() }
    }

    /// Stops the thread and waits for it to close its connection.
    public func stop() {
        let running = state.withLock { state -> Bool in
            defer { state.stopped = true }
            return !state.stopped && state.started
        }
        if running {
            stopping.signal()
            finished.wait()
        }
    }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    /// Waits between reconnects: 100 ms, 200 ms, … 5 s.
    static let reconnectBackoff = Backoff(base: .milliseconds(100), cap: .seconds(5))

    private func loop() {
        var failures = 0
        while !isStopped {
            do {
                let connection = try PostgresConnection(conninfo: conninfo)
                try connection.listen(channel)
                failures = 0
                onWake()
                var idle = Duration.zero
                while !isStopped {
                    let slice = Duration.milliseconds(250)
                    if try !connection.waitForNotifications(timeout: slice).isEmpty {
                        idle = .zero
                        onWake()
                    } else {
                        idle += slice
                        if idle >= healthCheckInterval {
                            // A half-open TCP connection never reports an error on its own.
                            try connection.query("SELECT 1")
                            idle = .zero
                        }
                    }
                }
            } catch {
                onError(error)
                failures += 1
                let delay = Self.reconnectBackoff.delay(afterAttempt: failures, jitter: 1)
                _ = stopping.wait(timeout: .now() + .milliseconds(Int(delay.wholeMilliseconds)))
            }
        }
    }
}
