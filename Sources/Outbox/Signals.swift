import Foundation

/// Wakes waiting loops (NOTIFY arrived, events settled, or a stop was requested). A wake that happens
/// while a loop is busy is not lost: `wait(after:)` returns at once when the generation moved.
public final class WakeSignal: @unchecked Sendable {
    private let lock = NSLock()
    private var generation: UInt64 = 0
    private var waiters: [UUID: CheckedContinuation<Void, Never>] = [:]

    public init() {}

    /// The current generation; pass it to `wait(after:timeout:)`.
    public var current: UInt64 { lock.withLock { generation } }

    /// Wakes one waiter (new work: one claimer takes it); busy loops see the generation move and look
    /// again when they finish.
    public func wake() {
        let woken = lock.withLock { () -> CheckedContinuation<Void, Never>? in
            generation &+= 1
            guard let key = waiters.keys.first else { return nil }
            return waiters.removeValue(forKey: key)
        }
        woken?.resume()
    }

    /// Wakes every waiter (stop).
    public func wakeAll() {
        let woken = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            generation &+= 1
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns when the generation moves past `seen`, or after `timeout`.
    public func wait(after seen: UInt64, timeout: Duration) async {
        let id = UUID()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = lock.withLock { () -> Bool in
                        if generation != seen { return true }
                        waiters[id] = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
            // Release the waiter if the timeout won.
            let orphan = lock.withLock { waiters.removeValue(forKey: id) }
            orphan?.resume()
        }
    }
}

/// A graceful-stop request with its deadline, shared by the loops.
public final class StopSignal: @unchecked Sendable {
    private let lock = NSLock()
    private var deadline: ContinuousClock.Instant?
    private var handlers: [@Sendable () -> Void] = []

    public init() {}

    /// Requests a stop; in-flight work has until `grace` from now.
    public func request(grace: Duration) {
        let run = lock.withLock { () -> [@Sendable () -> Void] in
            guard deadline == nil else { return [] }
            deadline = .now + grace
            defer { handlers.removeAll() }
            return handlers
        }
        for handler in run { handler() }
    }

    /// Runs `handler` once when a stop is requested (at once if it already was).
    public func onRequest(_ handler: @escaping @Sendable () -> Void) {
        let now = lock.withLock { () -> Bool in
            if deadline != nil { return true }
            handlers.append(handler)
            return false
        }
        if now { handler() }
    }

    public var isRequested: Bool { lock.withLock { deadline != nil } }

    /// True once a stop was requested and its grace period is over.
    public var deadlinePassed: Bool {
        guard let deadline = lock.withLock({ deadline }) else { return false }
        return ContinuousClock.now >= deadline
    }
}
