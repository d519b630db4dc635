import Synchronization

/// Deliveries waiting for a send slot, and the slots in use (`MAX_IN_FLIGHT`). The dispatcher takes
/// sends while slots are free; the claimer waits for room before claiming more.
final class SendQueue: Sendable {
    private struct State {
        var queued: [PendingSend] = []
        var head = 0
        var inFlight = 0
        var stopped = false
        /// Claimers waiting for room, each with the room it waits for.
        var roomWaiters: [(room: Int, continuation: CheckedContinuation<Void, Never>)] = []

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

    /// A taken send is over (answered or skipped): frees its slot and wakes claimers whose room is there now.
    func release() {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.inFlight -= 1
            guard !state.roomWaiters.isEmpty else { return [] }
            let free = highWater - state.load
            var ready: [CheckedContinuation<Void, Never>] = []
            state.roomWaiters.removeAll { waiter in
                guard waiter.room <= free else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for waiter in ready { waiter.resume() }
    }

    /// Returns when queued + in-flight leaves at least `room` below the high-water mark (or at once if it
    /// does, or on stop). Waiting for a batch's worth of room, rather than any room, keeps claims full-sized
    /// under a backlog: fewer, larger transactions for the same work.
    func waitForRoom(_ room: Int = 1) async {
        let room = min(max(1, room), highWater)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.stopped || state.load + room <= highWater { return true }
                state.roomWaiters.append((room, continuation))
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
            return (unsent, state.roomWaiters.map(\.continuation))
        }
        for waiter in room { waiter.resume() }
        return unsent
    }
}
