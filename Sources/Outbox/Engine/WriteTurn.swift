import Synchronization

/// One of this engine's writers at a time on the rows it holds: the completer's flushes and the heartbeat's
/// lease extensions touch the same delivery and event rows (answered-unwritten work keeps its lease), and two
/// multi-row UPDATEs taking row locks in different orders would deadlock (PostgreSQL breaks that only after
/// `deadlock_timeout`, 1 s, by failing one of them). Taking turns costs a beat at most a flush's time.
final class WriteTurn: Sendable {
    private struct State {
        var busy = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Runs `body` once no other turn is running; turns are served in arrival order.
    func run<T: Sendable>(_ body: () async -> T) async -> T {
        await take()
        let result = await body()
        pass()
        return result
    }

    /// Returns once this caller's turn has come (in arrival order); `pass` must follow.
    func take() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                guard state.busy else {
                    state.busy = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Ends the caller's turn: the next waiter's begins.
    func pass() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiters.removeFirst()  // the turn passes straight to the next waiter
        }
        next?.resume()
    }
}
