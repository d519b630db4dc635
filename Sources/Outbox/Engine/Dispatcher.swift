import Lifecycle
import Push
import Synchronization

/// Carries out what the engine's state machine decides: starts sends while slots are free, hands
/// answers, releases and settlements to the completer, and frees slots once outcomes are written.
/// Driven by callbacks, not tasks: an answer is booked on the thread it arrives on, so a send costs
/// no task and no thread hop of its own.
final class Dispatcher: Sendable {
    private struct Pumping {
        var active = false
        var again = false
        var abandoning = false
    }

    let book: EngineBook
    private let completer: Completer
    private let sender: any PushSender
    private let stop: StopSignal
    private let onProgress: @Sendable () -> Void
    private let pumping = Mutex(Pumping())
    /// No send starts within this of its lease lapsing (a third of `LEASE_SECONDS`).
    private let margin: Duration

    init(book: EngineBook, completer: Completer, sender: any PushSender, stop: StopSignal, margin: Duration,
         onProgress: @escaping @Sendable () -> Void) {
        self.margin = margin
        self.book = book
        self.completer = completer
        self.sender = sender
        self.stop = stop
        self.onProgress = onProgress
    }

    /// Starts holding a claimed group (its leases lapse at `leaseDeadline`); one without deliveries is settled at once.
    func open(events: [ClaimedEvent], eventKey: String, deliveries: [ClaimedDelivery], leaseDeadline: ContinuousClock.Instant) -> EventGroupID {
        book.transition { machine in
            let (id, actions) = machine.open(events: events, eventKey: eventKey, deliveries: deliveries, leaseDeadline: leaseDeadline)
            completer.accept(actions)
            return id
        }
    }

    /// Queues sends of opened groups and starts as many as slots allow.
    func enqueue(_ sends: [PendingSend]) {
        run { $0.enqueue(sends) }
        pump()
    }

    /// Starts queued sends while slots are free. One pump runs at a time; a call during a pump makes it look again.
    func pump() {
        let begin = pumping.withLock { state -> Bool in
            if state.active { state.again = true; return false }
            state.active = true
            state.again = false
            return true
        }
        guard begin else { return }
        while true {
            // Stopping: nothing new is sent; queued deliveries' leases are given back.
            if stop.isRequested { run { $0.stop() } }
            let margin = self.margin
            run { $0.next(now: .now, margin: margin) }
            let done = pumping.withLock { state -> Bool in
                if state.again { state.again = false; return false }
                state.active = false
                return true
            }
            if done { return }
        }
    }

    /// A flush is over: its deliveries free their slots, so more sends may start.
    func written(_ receipt: EngineStateMachine.Receipt) {
        book.transition { $0.written(receipt) }
        pump()
    }

    /// The stop deadline passed: sends still in flight are cancelled and their outcome treated as unknown.
    func abandonInFlight() {
        pumping.withLock { $0.abandoning = true }
        sender.cancelInFlight()
    }

    /// The abandoned sends' grace is over: every group not yet ended ends as abandoned.
    func abandonRemaining() {
        run { $0.abandonRemaining() }
    }

    private func answered(_ send: PendingSend, _ outcome: SendOutcome) {
        let abandoning = pumping.withLock { $0.abandoning }
        completer.report(send, outcome)
        run { $0.answered(send, outcome, abandoning: abandoning) }
        onProgress()
        pump()  // an answer that writes nothing (never sent, abandoned) frees its slot at once
    }

    /// One transition: its writes are buffered under the books' lock (so they keep the machine's order),
    /// its sends are started after it.
    private func run(_ transition: (inout EngineStateMachine) -> [EngineStateMachine.Action]) {
        let actions = book.transition { machine in
            let actions = transition(&machine)
            completer.accept(actions)
            return actions
        }
        for case .send(let send) in actions {
            sender.start(send.push) { [self] outcome in answered(send, outcome) }
        }
    }
}
