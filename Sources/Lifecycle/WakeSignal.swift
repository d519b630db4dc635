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
