import FoundationEssentials
import Lifecycle
import Metrics
import Push
import Synchronization

/// The engine's one event loop (STYLE "State machines and their owner"): the only owner of `EngineStateMachine`, an
/// actor on a serial queue of its own. Stages send it events — claimed, answered, written, leases renewed or lost,
/// stop — and it carries out the actions the machine returns: sends start, outcomes and group ends go to the
/// writer, waiting claimers wake. No lock guards the machine (one owner), nothing re-enters it (an action runs after
/// the transition that returned it; an answer that arrives while a send is being started waits in the mailbox).
///
/// Answers are the hot path: they arrive on the HTTP driver thread, go into a mailbox, and the loop takes them in
/// batches (one wake-up of the loop per batch, not per answer, and no task per answer).
actor EngineLoop {
    /// A claimed group on its way in: its events, their key, the leases' deadline, and its sends (their group is
    /// assigned here).
    struct Claimed: Sendable {
        var events: [ClaimedEvent]
        var eventKey: String
        var leaseDeadline: ContinuousClock.Instant
        var sends: [EngineStateMachine.ClaimedSend]
    }

    private struct Mailbox {
        /// Each answer with how long after its send started it came.
        var answers: [(PendingSend, SendOutcome, Duration)] = []
        /// A drain of the mailbox is queued on the loop.
        var scheduled = false
    }

    nonisolated let executor: SerialQueueExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    private(set) var machine: EngineStateMachine
    private let sender: any PushSender
    private let writer: Completer
    private let stopSignal: StopSignal
    /// No send starts within this of its lease lapsing (a third of `LEASE_SECONDS`).
    private let margin: Duration
    private let unwrittenGauge: Gauge?
    /// The window on the wire, from FCM's answer time; `windowGauge` shows it (`push_send_window`).
    private var window: SendWindow
    private let windowGauge: Gauge?
    private let onProgress: @Sendable () -> Void
    private nonisolated let mailbox = Mutex(Mailbox())

    /// Claimers waiting for room, by id, each with the room it waits for (true: there is room; false: its time is up).
    private var roomWaiters: [UInt64: (room: Int, continuation: CheckedContinuation<Bool, Never>)] = [:]
    private var nextRoomWaiter: UInt64 = 0
    /// A stop waiting for the sends in flight to be answered, by id (its deadline may take it back first).
    private var noSendsWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var nextNoSendsWaiter: UInt64 = 0
    /// The stop deadline passed and in-flight sends were cancelled: their answers are abandoned, not written.
    private var abandoning = false

    init(machine: EngineStateMachine, sender: any PushSender, writer: Completer, stop: StopSignal, margin: Duration,
         unwrittenGauge: Gauge?, windowGauge: Gauge? = nil, onProgress: @escaping @Sendable () -> Void) {
        executor = SerialQueueExecutor(label: "outbox.engine")
        self.machine = machine
        window = SendWindow(maximum: machine.slots)
        self.windowGauge = windowGauge
        windowGauge?.set(Double(machine.slots))
        self.sender = sender
        self.writer = writer
        stopSignal = stop
        self.margin = margin
        self.unwrittenGauge = unwrittenGauge
        self.onProgress = onProgress
    }

    // MARK: Events

    /// A claim's groups: each is opened (one without deliveries ends at once) and its sends queued and started.
    func claimed(_ groups: [Claimed], finished: [FinishedEvent]) {
        writer.finish(finished)
        var actions: [EngineStateMachine.Action] = []
        for group in groups {
            actions += machine.open(events: group.events, eventKey: group.eventKey, sends: group.sends, leaseDeadline: group.leaseDeadline).actions
        }
        perform(actions)
        startQueuedSends()
    }

    /// FCM answered a send `answerTime` after it started (any thread, possibly before `sender.start` returned): into
    /// the mailbox.
    nonisolated func answered(_ send: PendingSend, _ outcome: SendOutcome, after answerTime: Duration) {
        let schedule = mailbox.withLock { mailbox -> Bool in
            mailbox.answers.append((send, outcome, answerTime))
            defer { mailbox.scheduled = true }
            return !mailbox.scheduled
        }
        guard schedule else { return }
        executor.queue.async { self.assumeIsolated { $0.drainMailbox() } }
    }

    /// A write is over: its deliveries free their slots, so more sends may start.
    func written(_ receipt: EngineStateMachine.Receipt) {
        machine.written(receipt)
        startQueuedSends()
    }

    /// The leases the heartbeat must extend: every held event and every delivery not yet written.
    func heldLeases() -> (events: [(id: Int64, lease: LeaseToken)], deliveries: [(id: String, lease: LeaseToken)]) {
        machine.heldLeases()
    }

    /// The heartbeat's answer: what it renewed (and from when), what it found taken over. Returns the groups newly lost.
    func leases(renewed kept: Set<EngineStateMachine.Held>, deadline: ContinuousClock.Instant,
                lost lostEvents: Set<EngineStateMachine.Held>, lostDeliveries: Set<EngineStateMachine.Held>) -> Int {
        machine.renewed(events: kept, deadline: deadline)
        guard !lostEvents.isEmpty || !lostDeliveries.isEmpty else { return 0 }
        let lost = machine.markLost(events: lostEvents, deliveries: lostDeliveries)
        startQueuedSends()
        return lost
    }

    /// Stop: nothing new starts; queued sends are released (their groups end once nothing of them is in flight).
    func stop() {
        if !machine.stopped { perform(machine.stop()) }
        afterTransition()
    }

    /// The stop deadline passed: sends still in flight are cancelled and their outcome treated as unknown.
    func abandonInFlight() {
        abandoning = true
        sender.cancelInFlight()
    }

    /// The abandoned sends' grace is over: every group not yet ended ends as abandoned.
    func abandonRemaining() {
        perform(machine.abandonRemaining())
        afterTransition()
    }

    // MARK: Waits

    /// Returns true when queued + sending + unwritten leaves at least `room` below the high-water mark (or on stop),
    /// false once `limit` has passed without (the claimer says it is alive and waits again). Waiting for a batch's worth,
    /// rather than any room, keeps claims full-sized under a backlog.
    func waitForRoom(_ room: Int, upTo limit: Duration) async -> Bool {
        guard !machine.hasRoom(room) else { return true }
        nextRoomWaiter &+= 1
        let id = nextRoomWaiter
        let timer = Task {
            try? await Task.sleep(for: limit)
            self.roomDeadline(id)
        }
        let hasRoom = await withCheckedContinuation { roomWaiters[id] = (room, $0) }
        timer.cancel()
        return hasRoom
    }

    private func roomDeadline(_ id: UInt64) { roomWaiters.removeValue(forKey: id)?.continuation.resume(returning: false) }

    /// Returns once no send is in flight, or at `deadline`, whichever comes first.
    func waitUntilNoSends(deadline: ContinuousClock.Instant) async {
        guard machine.sending > 0 else { return }
        nextNoSendsWaiter &+= 1
        let id = nextNoSendsWaiter
        let timer = Task {
            try? await Task.sleep(until: deadline)
            self.noSendsDeadline(id)
        }
        await withCheckedContinuation { noSendsWaiters[id] = $0 }
        timer.cancel()
    }

    private func noSendsDeadline(_ id: UInt64) { noSendsWaiters.removeValue(forKey: id)?.resume() }

    /// The claimers' view: the high-water mark, the load, the sends on the wire.
    var highWater: Int { machine.highWater }
    var load: Int { machine.load }
    var sending: Int { machine.sending }

    // MARK: Carrying out

    private func drainMailbox() {
        while true {
            let answers = mailbox.withLock { mailbox -> [(PendingSend, SendOutcome, Duration)] in
                if mailbox.answers.isEmpty { mailbox.scheduled = false }
                defer { mailbox.answers.removeAll(keepingCapacity: true) }
                return mailbox.answers
            }
            guard !answers.isEmpty else { return }
            var actions: [EngineStateMachine.Action] = []
            let now = ContinuousClock.now
            // One wall-clock reading per batch: a SENT delivery's `"sentAt"`.
            let answeredAt = Date()
            // Read before the batch frees its slots: after its first answer the window is never full until the queued
            // sends start again (below), so a reading taken at each answer would almost never see sends waiting.
            let waiting = machine.isWindowFull
            for (send, outcome, answerTime) in answers {
                if case .notSent = outcome {} else if let limit = window.answered(after: answerTime, at: now, waiting: waiting) {
                    machine.setWindow(limit)
                    windowGauge?.set(Double(limit))
                }
                actions += machine.answered(send, outcome, at: answeredAt, abandoning: abandoning)
            }
            perform(actions)
            onProgress()
            startQueuedSends()
        }
    }

    /// Starts queued sends while slots are free (and, once a stop is requested, releases the queue instead).
    private func startQueuedSends() {
        if stopSignal.isRequested && !machine.stopped { perform(machine.stop()) }
        perform(machine.next(now: .now, margin: margin))
        afterTransition()
    }

    /// Hands the writes to the writer in the machine's order, then starts the sends (a send never goes to the writer:
    /// a transition that only starts sends skips it).
    private func perform(_ actions: [EngineStateMachine.Action]) {
        guard !actions.isEmpty else { return }
        if actions.contains(where: { if case .send = $0 { false } else { true } }) { writer.accept(actions, starved: machine.isStarved) }
        for case .send(let send) in actions {
            let started = ContinuousClock.now
            sender.start(send.push) { [self] outcome in answered(send, outcome, after: .now - started) }
        }
    }

    /// After a transition: wakes whoever it made ready, tells the writer whether sends wait for its slots, publishes
    /// the unwritten count.
    private func afterTransition() {
        writer.setStarved(machine.isStarved)
        unwrittenGauge?.set(Double(machine.unwritten))
        if !roomWaiters.isEmpty {
            for (id, waiter) in roomWaiters where machine.hasRoom(waiter.room) {
                roomWaiters.removeValue(forKey: id)
                waiter.continuation.resume(returning: true)
            }
        }
        if machine.sending == 0, !noSendsWaiters.isEmpty {
            let ready = noSendsWaiters.values
            noSendsWaiters.removeAll()
            for waiter in ready { waiter.resume() }
        }
    }
}
