import Metrics
import Push
import Synchronization

/// The engine's state machine behind a lock, with the waiters it wakes: claimers waiting for room and
/// a drain waiting for the engine to go idle. Every stage asks it what to do; none keeps books of its own.
final class EngineBook: Sendable {
    private struct State {
        var machine: EngineStateMachine
        /// Claimers waiting for room, each with the room it waits for.
        var roomWaiters: [(room: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        /// A stop waiting for the sends in flight to be answered, by id (a deadline may take one back first).
        var quietWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextQuietWaiter: UInt64 = 0

        /// Takes the waiters the last transition satisfied.
        mutating func ready() -> [CheckedContinuation<Void, Never>] {
            var ready: [CheckedContinuation<Void, Never>] = []
            if !roomWaiters.isEmpty {
                let machine = machine
                roomWaiters.removeAll { waiter in
                    guard machine.hasRoom(waiter.room) else { return false }
                    ready.append(waiter.continuation)
                    return true
                }
            }
            if machine.isIdle, !idleWaiters.isEmpty {
                ready += idleWaiters
                idleWaiters.removeAll()
            }
            if machine.sending == 0, !quietWaiters.isEmpty {
                ready += quietWaiters.values
                quietWaiters.removeAll()
            }
            return ready
        }
    }

    private let state: Mutex<State>
    /// `push_outcomes_unwritten`: answered sends whose outcome is not yet written.
    private let unwrittenGauge: Gauge?

    init(slots: Int, highWater: Int, unwrittenGauge: Gauge? = nil) {
        state = Mutex(State(machine: EngineStateMachine(slots: slots, highWater: highWater)))
        self.unwrittenGauge = unwrittenGauge
    }

    /// Claims are made only while the load stays at or below this.
    var highWater: Int { state.withLock { $0.machine.highWater } }
    /// Queued + sending + answered-unwritten deliveries.
    var load: Int { state.withLock { $0.machine.load } }
    /// Sends started and not yet answered.
    var sending: Int { state.withLock { $0.machine.sending } }
    /// Sends wait for a slot while every slot is held (sending or answered-unwritten).
    var isStarved: Bool { state.withLock { $0.machine.isStarved } }
    /// Groups held between claim and their written end.
    var groupCount: Int { state.withLock { $0.machine.groups.count } }

    /// Runs one transition, then wakes whoever it made ready and publishes the unwritten count.
    func transition<Result>(_ body: (inout EngineStateMachine) -> Result) -> Result {
        let (result, ready, unwritten) = state.withLock { state in
            let result = body(&state.machine)
            return (result, state.ready(), state.machine.unwritten)
        }
        for waiter in ready { waiter.resume() }
        unwrittenGauge?.set(Double(unwritten))
        return result
    }

    /// Returns when queued + sending + unwritten leaves at least `room` below the high-water mark (or at once
    /// if it does, or on stop). Waiting for a batch's worth of room, rather than any room, keeps claims
    /// full-sized under a backlog: fewer, larger transactions for the same work.
    func waitForRoom(_ room: Int = 1) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.machine.hasRoom(room) { return true }
                state.roomWaiters.append((room, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Returns once no send is in flight, or at `deadline`, whichever comes first.
    func waitUntilNoSends(deadline: ContinuousClock.Instant) async {
        let id = state.withLock { state in
            state.nextQuietWaiter &+= 1
            return state.nextQuietWaiter
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                // Cancelled (the deadline came first) before or after it registers, the waiter ends at once.
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        let now = self.state.withLock { state -> Bool in
                            if state.machine.sending == 0 || Task.isCancelled { return true }
                            state.quietWaiters[id] = continuation
                            return false
                        }
                        if now { continuation.resume() }
                    }
                } onCancel: {
                    self.state.withLock { $0.quietWaiters.removeValue(forKey: id) }?.resume()
                }
            }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
            // The deadline came first: take the waiter back and let its task end.
            state.withLock { $0.quietWaiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Returns once nothing is held.
    func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.machine.isIdle { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
