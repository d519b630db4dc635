import FCM
import Lifecycle
import Synchronization

/// Starts each queued send as soon as a slot is free; each frees its slot when answered and
/// starts the next. Driven by callbacks, not tasks: the answer is recorded on the thread it
/// arrives on, so a send costs no task and no thread hop of its own.
final class Dispatcher: Sendable {
    private struct Pumping {
        var active = false
        var again = false
        var abandoning = false
    }

    private let queue: SendQueue
    private let ledger: EventLedger
    private let completer: Completer
    private let sender: any PushSender
    private let stop: StopSignal
    private let onProgress: @Sendable () -> Void
    private let pumping = Mutex(Pumping())

    init(queue: SendQueue, ledger: EventLedger, completer: Completer, sender: any PushSender, stop: StopSignal,
         onProgress: @escaping @Sendable () -> Void) {
        self.queue = queue
        self.ledger = ledger
        self.completer = completer
        self.sender = sender
        self.stop = stop
        self.onProgress = onProgress
    }

    /// Queues sends and starts as many as slots allow.
    func enqueue(_ sends: [PendingSend]) {
        queue.enqueue(sends)
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
            while let send = queue.take() {
                if stop.isRequested {
                    // Stopping: nothing new is sent; the delivery's lease is given back.
                    completer.skipped(send)
                    queue.release()
                } else if !ledger.isSendable(send) {
                    // The lease was taken over: another instance owns this delivery now.
                    _ = ledger.close(send.group, delivery: send.delivery.id, .notSent)
                    queue.release()
                } else {
                    sender.start(send.push) { [self] outcome in answered(send, outcome) }
                }
            }
            let done = pumping.withLock { state -> Bool in
                if state.again { state.again = false; return false }
                state.active = false
                return true
            }
            if done { return }
        }
    }

    private func answered(_ send: PendingSend, _ outcome: SendOutcome) {
        if case .retry = outcome, pumping.withLock({ $0.abandoning }) {
            // Cancelled at the stop deadline: FCM may have it, so its lease is kept (no re-send before it expires).
            completer.abandoned(send)
        } else {
            completer.record(send, outcome)
        }
        queue.release()
        onProgress()
        pump()
    }

    /// The stop deadline passed: sends still in flight are cancelled and their outcome treated as unknown.
    func abandonInFlight() {
        pumping.withLock { $0.abandoning = true }
        sender.cancelInFlight()
    }
}
