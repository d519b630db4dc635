import Synchronization

/// Deliveries waiting for a send slot, and the slots in use. One consumer (the dispatcher) takes
/// sends as slots free up; the claimer asks for room before claiming more.
final class SendQueue: Sendable {
    private struct State {
        var queued: [PendingSend] = []
        var head = 0
        var inFlight = 0
        var stopped = false
        var consumer: CheckedContinuation<PendingSend?, Never>?
        var roomWaiter: CheckedContinuation<Void, Never>?

        var queuedCount: Int { queued.count - head }
        var load: Int { queuedCount + inFlight }

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

    /// Adds sends; hands one to a waiting dispatcher when a slot is free.
    func enqueue(_ sends: [PendingSend]) {
        guard !sends.isEmpty else { return }
        let handoff = state.withLock { state -> (CheckedContinuation<PendingSend?, Never>, PendingSend)? in
            state.queued.append(contentsOf: sends)
            guard let consumer = state.consumer, state.inFlight < slots, let next = state.popFirst() else { return nil }
            state.consumer = nil
            state.inFlight += 1
            return (consumer, next)
        }
        if let (consumer, next) = handoff { consumer.resume(returning: next) }
    }

    /// The next send once a slot is free (the slot is taken for it); nil once stopped.
    func next() async -> PendingSend? {
        await withCheckedContinuation { (continuation: CheckedContinuation<PendingSend?, Never>) in
            let ready = state.withLock { state -> PendingSend?? in
                if state.stopped { return .some(nil) }
                if state.inFlight < slots, let next = state.popFirst() {
                    state.inFlight += 1
                    return .some(next)
                }
                state.consumer = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// A send finished (answered, or skipped): frees its slot, wakes the dispatcher or the claimer.
    func finished() {
        let wake = state.withLock { state -> (CheckedContinuation<PendingSend?, Never>?, PendingSend?, CheckedContinuation<Void, Never>?) in
            state.inFlight -= 1
            var consumer: CheckedContinuation<PendingSend?, Never>?
            var next: PendingSend?
            if let waiting = state.consumer, !state.stopped, let send = state.popFirst() {
                state.consumer = nil
                state.inFlight += 1
                consumer = waiting
                next = send
            }
            var room: CheckedContinuation<Void, Never>?
            if state.load < highWater, let waiter = state.roomWaiter {
                state.roomWaiter = nil
                room = waiter
            }
            return (consumer, next, room)
        }
        if let consumer = wake.0 { consumer.resume(returning: wake.1) }
        wake.2?.resume()
    }

    /// Returns when queued + in-flight drops below the high-water mark (or at once if it is, or on stop).
    func waitForRoom() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.stopped || state.load < highWater { return true }
                state.roomWaiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Stops handing out sends; returns the ones never started.
    func stop() -> [PendingSend] {
        let (unsent, consumer, room) = state.withLock { state -> ([PendingSend], CheckedContinuation<PendingSend?, Never>?, CheckedContinuation<Void, Never>?) in
            state.stopped = true
            let unsent = Array(state.queued[state.head...])
            state.queued.removeAll()
            state.head = 0
            defer { state.consumer = nil; state.roomWaiter = nil }
            return (unsent, state.consumer, state.roomWaiter)
        }
        consumer?.resume(returning: nil)
        room?.resume()
        return unsent
    }
}
