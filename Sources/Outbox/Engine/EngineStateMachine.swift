import FoundationEssentials
import Push
import Timekeeping

/// The delivery engine's bookkeeping as one value: which events this instance holds, and where each
/// of their deliveries is (queued → sending → answered-unwritten → written). Its methods change the
/// state and return the actions to take; it does no I/O, so every transition is testable without a
/// database or network (the shape of postgres-nio's `ListenStateMachine`). The SQL stays the final,
/// lease-guarded judge; this machine only decides what to ask of it and when.
///
/// Load: a send holds a place in `capacity` (`MAX_IN_FLIGHT`) from its start until its outcome is *written*,
/// not merely answered, and one of `slots` while it is on the wire. So answered-but-unwritten deliveries never
/// number more than `capacity`, and when the database records outcomes slower than FCM answers, sending slows to
/// the database's pace.
struct EngineStateMachine: Sendable {
    /// Where one delivery is.
    enum Phase: Sendable, Equatable {
        case queued
        case sending
        /// FCM answered; the outcome is handed to the writer and not yet written.
        case answered
    }

    struct Delivery: Sendable {
        var lease: LeaseToken
        var phase: Phase
        /// The heartbeat could not extend its lease: another instance owns it; it is not sent.
        var lost = false
    }

    /// The events of one claim sharing an eventKey (normally one), and their deliveries until written.
    struct Group: Sendable {
        var events: [ClaimedEvent]
        var eventKey: String
        var deliveries: [String: Delivery]
        /// Every delivery the claim's fan-out gave it (`deliveries` loses them as they are written): the evidence its
        /// settlement asks the table for.
        var deliveryIds: [String] = []
        /// Deliveries queued or sending.
        var unanswered: Int
        var phase: GroupPhase = .settling
        /// Longest wait any delivery asked for (Retry-After, QUOTA floor), and why.
        var retryFloor: Duration = .zero
        var retryReason: String?
        /// When its events' leases lapse by this process's monotonic clock: the claim's or the last confirmed
        /// renewal's start + `LEASE_SECONDS`. No send starts that could still be in flight then.
        var leaseDeadline: ContinuousClock.Instant = .now + .seconds(3600)

        /// A delivery will not be answered (never sent, or abandoned): the events cannot be settled, only released.
        mutating func releaseAtEnd() {
            if phase == .settling { phase = .releasing }
        }
    }

    /// Where a group is, named by what its end will write.
    enum GroupPhase: Sendable, Equatable {
        /// Every delivery so far is queued, sending or answered: its end settles the events.
        case settling
        /// A delivery was never sent (stop), or abandoned at the stop deadline (its outcome unknown, its lease kept):
        /// its end releases the events.
        case releasing
        /// The event's lease was taken over or lapsed: nothing more is sent, its end writes nothing, its leases are not renewed.
        case lost
        /// Its end was handed to the writer; it leaves when that is written. `lost`: its lease was found taken over since.
        case ending(lost: Bool)

        /// Its leases are another instance's now.
        var isLost: Bool { self == .lost || self == .ending(lost: true) }
    }

    /// What a group's end writes: decided here (through `EventFate`), written as it is by the completer.
    enum GroupEnd: Sendable {
        /// Every delivery answered: each event DONE, due again after its delay, or DEAD after its last attempt, as the
        /// table's evidence says (`EventFate.settled`, applied by the completion statement).
        case settle([EventSettlement])
        /// Something was never sent or abandoned: the events are given back, due again at once, the attempt uncounted.
        case release([(id: Int64, lease: LeaseToken)])
        /// The lease was lost: another instance owns the events, and the lease guard would refuse any write.
        case nothing
    }

    /// What the engine must do next.
    enum Action: Sendable {
        /// Start this send (its slot is taken).
        case send(PendingSend)
        /// Write what this answered delivery's row gets, as decided here (`EventFate.delivery`); its slot stays taken
        /// until `written`.
        case record(PendingSend, DeliveryWrite)
        /// Give this never-sent delivery's lease back (stop).
        case release(PendingSend)
        /// Write the end of this group (it leaves once that is written).
        case end(EventGroupID, GroupEnd)
    }

    /// What one write confirmed (or gave up on): the deliveries and group ends it carried.
    struct Receipt: Sendable, Equatable {
        var deliveries: [Key] = []
        var groups: [EventGroupID] = []

        struct Key: Sendable, Equatable {
            var group: EventGroupID
            var delivery: String
        }

        mutating func append(_ other: Receipt) {
            deliveries += other.deliveries
            groups += other.groups
        }
    }

    /// Sends that may be in flight at once.
    let slots: Int
    /// Sends that may be in flight now (at most `slots`): the window FCM's answer time allows (`SendWindow`).
    private(set) var window: Int
    /// Sends that may be in flight or answered-unwritten at once (`MAX_IN_FLIGHT`, at least `slots`): a send's place in
    /// it frees only once its outcome is written, so this bounds the unwritten outcomes and what a `kill -9` can re-send.
    let capacity: Int
    /// Claims are made only while queued + sending + unwritten stays at or below this.
    let highWater: Int
    /// Prices an event's next attempt when its deliveries are still pending.
    let backoff: Backoff

    private(set) var groups: [EventGroupID: Group] = [:]
    private var queue: [PendingSend] = []
    private var head = 0
    /// Sends started and not yet answered.
    private(set) var sending = 0
    /// Sends answered whose outcome is not yet written.
    private(set) var unwritten = 0
    private(set) var stopped = false
    private var nextGroup = 0

    init(slots: Int, highWater: Int, capacity: Int? = nil, backoff: Backoff = Backoff()) {
        self.slots = max(1, slots)
        window = self.slots
        self.capacity = max(self.slots, capacity ?? slots)
        self.highWater = max(self.capacity, highWater)
        self.backoff = backoff
    }

    /// Deliveries queued and not yet started.
    var queued: Int { queue.count - head }
    /// What counts against the high-water mark: queued, sending and answered-unwritten deliveries.
    var load: Int { queued + sending + unwritten }
    /// Sends are queued and the capacity is held by unwritten outcomes: only a written outcome lets the next one start.
    var isStarved: Bool { queued > 0 && sending + unwritten >= capacity }

    /// Whether a claimer waiting for `room` may claim now (always, once stopped: it then sees the stop).
    func hasRoom(_ room: Int) -> Bool { stopped || load + min(max(1, room), highWater) <= highWater }

    // MARK: Claim

    /// A claimed delivery with the push it sends and its outbox row's `"createdAt"` (the latency metric's start).
    typealias ClaimedSend = (delivery: ClaimedDelivery, push: DoseTakenPush, createdAt: Date?)

    /// Starts holding a claimed group and queues its sends (once stopped they are released at once). Without
    /// deliveries it ends at once (the `.end` action).
    mutating func open(events: [ClaimedEvent], eventKey: String, sends: [ClaimedSend],
                       leaseDeadline: ContinuousClock.Instant = .now + .seconds(3600)) -> (id: EventGroupID, actions: [Action]) {
        let id = EventGroupID(raw: nextGroup)
        nextGroup &+= 1
        var entries: [String: Delivery] = [:]
        entries.reserveCapacity(sends.count)
        for send in sends { entries[send.delivery.id] = Delivery(lease: send.delivery.lease, phase: .queued) }
        var group = Group(events: events, eventKey: eventKey, deliveries: entries, deliveryIds: sends.map(\.delivery.id), unanswered: entries.count)
        group.leaseDeadline = leaseDeadline
        var actions: [Action] = []
        end(id, group, into: &actions)
        let outboxIds = events.map(\.id)
        let pending = sends.map { PendingSend(group: id, outboxIds: outboxIds, delivery: $0.delivery, push: $0.push, createdAt: $0.createdAt) }
        if stopped {
            for send in pending { actions += notSent(send) }
        } else {
            queue.append(contentsOf: pending)
        }
        return (id, actions)
    }

    // MARK: Send

    /// What to do with the queue while slots are free: start sends, and drop those whose lease was lost or
    /// lapses before `now + margin` (a send started then could still be in flight when another instance takes
    /// the work over; their group may end with it). Empty when nothing is queued, no slot is free, or stopped.
    mutating func next(now: ContinuousClock.Instant = .now, margin: Duration = .zero) -> [Action] {
        var actions: [Action] = []
        while !stopped, sending < window, sending + unwritten < capacity, let send = popFirst() {
            // Taken out while changed, so the group's dictionary is changed in place (never copied).
            guard var group = groups.removeValue(forKey: send.group) else { continue }
            // Found once by index: the delivery's id is hashed once per transition.
            guard let index = group.deliveries.index(forKey: send.delivery.id), group.deliveries.values[index].phase == .queued else {
                groups[send.group] = group
                continue
            }
            if !group.phase.isLost, now + margin >= group.leaseDeadline {
                // Not renewed in time (the database unreachable): the lease lapses, and the work with it.
                group.phase = .lost
            }
            if group.phase.isLost || group.deliveries.values[index].lost {
                // Another instance owns it now: nothing is sent, nothing written for the delivery.
                group.deliveries.remove(at: index)
                group.unanswered -= 1
                group.releaseAtEnd()
                end(send.group, group, into: &actions)
                continue
            }
            group.deliveries.values[index].phase = .sending
            groups[send.group] = group
            sending += 1
            actions.append(.send(send))
        }
        return actions
    }

    /// The window on the wire from now on (1 … `slots`); sends already on the wire finish.
    mutating func setWindow(_ window: Int) {
        self.window = min(slots, max(1, window))
    }

    /// Sends are queued behind the window (not behind the unwritten outcomes' places).
    var isWindowFull: Bool { queued > 0 && sending >= window }

    /// FCM answered a send (the loop had the answer at `answeredAt`). What its row gets is decided here, once
    /// (`EventFate.delivery`), and handed to the writer as `.record` (the slot stays taken until it is written); the
    /// group ends when this was its last open delivery. `abandoning`: the stop deadline cancelled it, so its outcome is
    /// unknown and nothing is written for it (its lease stays: FCM may have it).
    mutating func answered(_ send: PendingSend, _ outcome: SendOutcome, at answeredAt: Date = Date(), abandoning: Bool = false) -> [Action] {
        guard var group = groups.removeValue(forKey: send.group) else { return [] }
        guard let index = group.deliveries.index(forKey: send.delivery.id), group.deliveries.values[index].phase == .sending else {
            groups[send.group] = group
            return []
        }
        sending -= 1
        group.unanswered -= 1
        var actions: [Action] = []
        switch EventFate.delivery(outcome, answeredAt: answeredAt, sendStartedAt: send.delivery.claimedAt) {
        case nil:
            group.deliveries.remove(at: index)
            group.releaseAtEnd()
            actions.append(.release(send))
        case .pending? where abandoning:
            group.deliveries.remove(at: index)
            group.releaseAtEnd()
        case let write?:
            if case .pending(let reason, let notBefore) = write, notBefore >= group.retryFloor || group.retryReason == nil {
                group.retryFloor = max(group.retryFloor, notBefore)
                group.retryReason = reason
            }
            group.deliveries.values[index].phase = .answered
            unwritten += 1
            actions.append(.record(send, write))
        }
        end(send.group, group, into: &actions)
        return actions
    }

    // MARK: Write

    /// A write is over (done, refused and isolated, or given up): its deliveries free their slots and leave;
    /// groups whose end it carried leave.
    mutating func written(_ receipt: Receipt) {
        for key in receipt.deliveries {
            guard var group = groups.removeValue(forKey: key.group) else { continue }
            if let index = group.deliveries.index(forKey: key.delivery), group.deliveries.values[index].phase == .answered {
                group.deliveries.remove(at: index)
                unwritten -= 1
            }
            groups[key.group] = group
        }
        for id in receipt.groups {
            guard let group = groups.removeValue(forKey: id) else { continue }
            // Not expected (a group's end is written after its outcomes), but a slot must never leak.
            unwritten -= group.deliveries.values.count { $0.phase == .answered }
            sending -= group.deliveries.values.count { $0.phase == .sending }
        }
    }

    // MARK: Leases

    /// The leases the heartbeat must extend: every held event and every delivery not yet written,
    /// answered-unwritten ones included (so nothing this instance sent is claimed again before it is written).
    func heldLeases() -> (events: [(id: Int64, lease: LeaseToken)], deliveries: [(id: String, lease: LeaseToken)]) {
        var events: [(id: Int64, lease: LeaseToken)] = []
        var deliveries: [(id: String, lease: LeaseToken)] = []
        for group in groups.values where !group.phase.isLost {
            for event in group.events { events.append((event.id, event.lease)) }
            for (id, delivery) in group.deliveries where !delivery.lost { deliveries.append((id, delivery.lease)) }
        }
        return (events, deliveries)
    }

    /// The heartbeat confirmed these events' leases, renewed at the instant it started: their groups' deadlines move
    /// to `deadline`.
    mutating func renewed(events kept: Set<Held>, deadline: ContinuousClock.Instant) {
        guard !kept.isEmpty else { return }
        for id in Array(groups.keys) {
            guard var group = groups.removeValue(forKey: id) else { continue }
            if !group.phase.isLost, group.events.contains(where: { kept.contains(Held(id: "\($0.id)", lease: $0.lease)) }) {
                group.leaseDeadline = max(group.leaseDeadline, deadline)
            }
            groups[id] = group
        }
    }

    /// A row id with the lease it was held under.
    struct Held: Hashable, Sendable {
        var id: String
        var lease: LeaseToken
    }

    /// Marks what the heartbeat could not extend as lost, matched by id and lease (only what is still held
    /// under that lease: an extension racing a write finds the written rows unleased, and a row written and
    /// claimed again holds a new lease); returns how many groups were newly lost.
    mutating func markLost(events lostEvents: Set<Held>, deliveries lostDeliveries: Set<Held>) -> Int {
        var count = 0
        for id in Array(groups.keys) {
            guard var group = groups.removeValue(forKey: id) else { continue }
            if !group.phase.isLost, group.events.contains(where: { lostEvents.contains(Held(id: "\($0.id)", lease: $0.lease)) }) {
                group.phase = group.phase == .ending(lost: false) ? .ending(lost: true) : .lost
                count += 1
            }
            if !lostDeliveries.isEmpty {
                for (key, delivery) in group.deliveries where !delivery.lost && lostDeliveries.contains(Held(id: key, lease: delivery.lease)) {
                    group.deliveries[key]?.lost = true
                }
            }
            groups[id] = group
        }
        return count
    }

    // MARK: Stop

    /// Nothing new starts: every queued send is released (its group ends once nothing of it is sending).
    mutating func stop() -> [Action] {
        stopped = true
        let unsent = Array(queue[head...])
        queue.removeAll()
        head = 0
        return unsent.flatMap { notSent($0) }
    }

    /// The stop deadline is past and the abandoned sends' grace is over: every group not yet ended ends as
    /// abandoned (events released, leases of unanswered deliveries kept). Late answers are then ignored.
    mutating func abandonRemaining() -> [Action] {
        var actions: [Action] = []
        for id in groups.keys.sorted(by: { $0.raw < $1.raw }) {
            guard var group = groups.removeValue(forKey: id) else { continue }
            if case .ending = group.phase {
                groups[id] = group
                continue
            }
            for (key, delivery) in group.deliveries where delivery.phase != .answered {
                if delivery.phase == .sending { sending -= 1 }
                group.deliveries.removeValue(forKey: key)
            }
            group.unanswered = 0
            group.releaseAtEnd()
            end(id, group, into: &actions)
        }
        return actions
    }

    // MARK: Helpers

    /// A queued delivery that will not be sent: it leaves, its lease is given back.
    private mutating func notSent(_ send: PendingSend) -> [Action] {
        guard var group = groups.removeValue(forKey: send.group) else { return [] }
        guard group.deliveries[send.delivery.id]?.phase == .queued else {
            groups[send.group] = group
            return []
        }
        group.deliveries.removeValue(forKey: send.delivery.id)
        group.unanswered -= 1
        group.releaseAtEnd()
        var actions: [Action] = [.release(send)]
        end(send.group, group, into: &actions)
        return actions
    }

    /// Stores the group; hands its end to the writer once nothing of it is queued or sending.
    private mutating func end(_ id: EventGroupID, _ group: Group, into actions: inout [Action]) {
        var group = group
        defer { groups[id] = group }
        guard group.unanswered == 0 else { return }
        let end: GroupEnd
        switch group.phase {
        case .ending: return
        case .lost: end = .nothing
        case .releasing: end = .release(group.events.map { ($0.id, $0.lease) })
        case .settling:
            end = .settle(group.events.map { event in
                EventSettlement(id: event.id, eventKey: group.eventKey, patientId: event.patientId, lease: event.lease,
                                retryDelay: EventFate.retryDelay(eventId: event.id, attempts: event.attempts, floor: group.retryFloor, backoff: backoff),
                                error: group.retryReason, deliveryIds: group.deliveryIds)
            })
        }
        group.phase = .ending(lost: group.phase.isLost)
        actions.append(.end(id, end))
    }

    private mutating func popFirst() -> PendingSend? {
        guard head < queue.count else { return nil }
        let send = queue[head]
        head += 1
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024, head * 2 > queue.count {
            queue.removeFirst(head)
            head = 0
        }
        return send
    }
}
