import Synchronization

/// A graceful-stop request with its deadline. The service runner requests it on SIGTERM/SIGINT;
/// a loop checks `isRequested` between steps, rests with `sleep(for:)`, or awaits `wait()`.
public final class StopSignal: Sendable {
    private struct State {
        var deadline: ContinuousClock.Instant?
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// Requests a stop; in-flight work has until `grace` from now.
    public func request(grace: Duration) { request(deadline: .now + grace) }

    /// Requests a stop with an absolute deadline; later requests change nothing.
    public func request(deadline: ContinuousClock.Instant) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard state.deadline == nil else { return [] }
            state.deadline = deadline
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// True once a stop was requested.
    public var isRequested: Bool { state.withLock { $0.deadline != nil } }

    /// The deadline of the requested stop, nil before a request.
    public var deadline: ContinuousClock.Instant? { state.withLock { $0.deadline } }

    /// True once a stop was requested and its grace period is over.
    public var deadlinePassed: Bool {
        guard let deadline else { return false }
        return ContinuousClock.now >= deadline
    }

    /// Returns when a stop is requested (at once if it already was) or when the task is cancelled.
    public func wait() async {
        let id = state.withLock { state in state.nextWaiter &+= 1; return state.nextWaiter }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.deadline != nil || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Rests for `duration`, returning early when a stop is requested or the task is cancelled.
    public func sleep(for duration: Duration) async {
        guard !isRequested else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait() }
            group.addTask { try? await Task.sleep(for: duration) }
            await group.next()
            group.cancelAll()
        }
    }
}
