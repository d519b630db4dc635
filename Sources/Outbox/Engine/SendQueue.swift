import Synchronization

/// Deliveries waiting for a send slot, and the slots in use (`MAX_IN_FLIGHT`). The dispatcher takes
/// sends while slots are free; the claimer waits for room before claiming more.
final class SendQueue: Sendable {
    private struct State {
        var queued: [PendingSend] = []
        var head = 0
        var inFlight = 0
        var stopped = false
        var roomWaiters: [CheckedContinuation<Void, Never>] = []

        var load: Int { queued.count - head + inFlight }

        mutating func popFirst() -> PendingSend? {
            guard head < queued.count else { return nil }
            let send = queued[head]
            head += 1
            if head == queued.count {
                queued.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 1024, head * 2 > queued.count {
                queued.removeFirst(head)
                head = 0
            }
            return send
        }
    }

    /// Sends in flight at once (`MAX_IN_FLIGHT`).
    let slots: Int
    /// The claimer claims only while queued + in-flight deliveries are below this.
    let highWater: Int
    private let state = Mutex(State())

    init(slots: Int, highWater: Int) {
        self.slots = max(1, slots)
        self.highWater = max(self.slots, highWater)
    }

    /// Queued plus in-flight deliveries.
    var load: Int { state.withLock { $0.load } }
    /// Sends started and not yet answered.
    var inFlight: Int { state.withLock { $0.inFlight } }

    /// Adds sends at the back of the queue.
    func enqueue(_ sends: [PendingSend]) {
        guard !sends.isEmpty else { return }
        state.withLock { $0.queued.append(contentsOf: sends) }
    }

    /// The next send when a slot is free (the slot is taken for it); nil when none is queued, no slot is free, or stopped.
    func take() -> PendingSend? {
        state.withLock { state in
            guard !state.stopped, state.inFlight < slots, let next = state.popFirst() else { return nil }
            state.inFlight += 1
            return next
        }
    }

    /// A taken send is over (answered or skipped): frees its slot and wakes claimers waiting for room.
    func release() {
        let room = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.inFlight -= 1
            guard state.load < highWater, !state.roomWaiters.isEmpty else { return [] }
            defer { state.roomWaiters.removeAll() }
            return state.roomWaiters
        }
        for waiter in room { waiter.resume() }
    }

    /// Returns when queued + in-flight drops below the high-water mark (or at once if it is, or on stop).
    func waitForRoom() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.stopped || state.load < highWater { return true }
                state.roomWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Stops handing out sends; returns the ones never started.
    func stop() -> [PendingSend] {
        let (unsent, room) = state.withLock { state -> ([PendingSend], [CheckedContinuation<Void, Never>]) in
            state.stopped = true
            let unsent = Array(state.queued[state.head...])
            state.queued.removeAll()
            state.head = 0
            defer { state.roomWaiters.removeAll() }
            return (unsent, state.roomWaiters)
        }
        for waiter in room { waiter.resume() }
        return unsent
    }
}
