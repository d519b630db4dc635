import FoundationEssentials
import Synchronization

/// Wakes waiting loops (NOTIFY arrived, events settled, or a stop was requested). A wake that happens
/// while a loop is busy is not lost: `wait(after:)` returns at once when the generation moved.
public final class WakeSignal: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        /// Waiter ids: a counter, not `UUID()` (a `getrandom` system call on every wait).
        var nextWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// The current generation; pass it to `wait(after:timeout:)`.
    public var current: UInt64 { state.withLock { $0.generation } }

    /// Wakes one waiter (new work: one claimer takes it); busy loops see the generation move and look
    /// again when they finish.
    public func wake() {
        let woken = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.generation &+= 1
            guard let key = state.waiters.keys.first else { return nil }
            return state.waiters.removeValue(forKey: key)
        }
        woken?.resume()
    }

    /// Wakes every waiter (stop).
    public func wakeAll() {
        let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.generation &+= 1
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns when the generation moves past `seen`, after `timeout`, or when the task is cancelled.
    public func wait(after seen: UInt64, timeout: Duration) async {
        let id = state.withLock { state in state.nextWaiter &+= 1; return state.nextWaiter }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                // Cancelled (the timeout came first) before or after it registers, the waiter ends at once.
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        let resumeNow = state.withLock { state -> Bool in
                            if state.generation != seen || Task.isCancelled { return true }
                            state.waiters[id] = continuation
                            return false
                        }
                        if resumeNow { continuation.resume() }
                    }
                } onCancel: {
                    state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
                }
            }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
            // Release the waiter if the timeout won.
            let orphan = state.withLock { $0.waiters.removeValue(forKey: id) }
            orphan?.resume()
        }
    }
}

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
