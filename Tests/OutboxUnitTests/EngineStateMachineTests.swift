import FCM
import Foundation
@testable import Outbox
import Push
import Testing
import Timekeeping

/// The engine's bookkeeping without a database or network: every transition, the load accounting
/// (a slot is held from a send's start until its outcome is written), and stop in every state.
@Suite("Engine state machine")
struct EngineStateMachineTests {
    typealias Machine = EngineStateMachine

    /// One claimed event with `devices` deliveries, opened (its sends queued) in `machine`; returns its group, its
    /// sends as the machine queued them, and what opening it did.
    static func open(_ machine: inout Machine, key: String = "doseTaken:g", eventId: Int64 = 1, devices: Int,
                     leaseDeadline: ContinuousClock.Instant = .now + .seconds(3600)) -> (EventGroupID, [PendingSend], [Machine.Action]) {
        let lease = LeaseToken()
        let event = ClaimedEvent(id: eventId, eventType: "DOSE_TAKEN", patientId: "p", payload: "{}", attempts: 1, ageSeconds: 0,
                                 displayName: "n", lease: lease)
        let claimed: [Machine.ClaimedSend] = (0..<devices).map { index in
            let delivery = ClaimedDelivery(id: "\(key)/d\(index)", eventKey: key, patientId: "p", deviceId: "dev\(index)", token: "t\(index)",
                                           claimedAt: Date(), lease: lease)
            return (delivery, DoseTakenPush(token: delivery.token, eventKey: key, patientId: "p", displayName: "n", date: "2026-02-11",
                                            slot: "morning", recordingGroupId: "g", withinTime: true), nil)
        }
        let (id, actions) = machine.open(events: [event], eventKey: key, sends: claimed, leaseDeadline: leaseDeadline)
        return (id, claimed.map { PendingSend(group: id, outboxIds: [eventId], delivery: $0.delivery, push: $0.push) }, actions)
    }

    /// `open` on a running machine: opening a group with deliveries does nothing yet.
    static func claim(_ machine: inout Machine, key: String = "doseTaken:g", eventId: Int64 = 1, devices: Int) -> (EventGroupID, [PendingSend]) {
        let (id, sends, actions) = open(&machine, key: key, eventId: eventId, devices: devices)
        #expect(actions.isEmpty == (devices > 0))
        return (id, sends)
    }

    /// Takes every send the machine starts now.
    static func started(_ machine: inout Machine) -> [PendingSend] {
        var sends: [PendingSend] = []
        while true {
            let actions = machine.next()
            if actions.isEmpty { return sends }
            for case .send(let send) in actions { sends.append(send) }
        }
    }

    static func receipt(_ actions: [Machine.Action]) -> Machine.Receipt {
        var receipt = Machine.Receipt()
        for action in actions {
            switch action {
            case .record(let send, _): receipt.deliveries.append(.init(group: send.group, delivery: send.delivery.id))
            case .end(let id, _): receipt.groups.append(id)
            case .send, .release: break
            }
        }
        return receipt
    }

    static func kinds(_ actions: [Machine.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .send: "send"
            case .record: "record"
            case .release: "release"
            case .end(_, .settle): "end(settle)"
            case .end(_, .release): "end(release)"
            case .end(_, .nothing): "end(nothing)"
            }
        }
    }

    @Test func answeredButUnwritten_holdsItsSlot_untilWritten() {
        var machine = Machine(slots: 2, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 4)
        #expect(machine.load == 4)
        let first = Self.started(&machine)
        #expect(first.count == 2)
        #expect(machine.sending == 2)
        // Both answered: their outcomes are to be written, and no third send starts before they are.
        let a = machine.answered(first[0], .sent(messageName: "m0"))
        let b = machine.answered(first[1], .sent(messageName: "m1"))
        #expect(Self.kinds(a) == ["record"])
        #expect(Self.kinds(b) == ["record"])
        #expect(machine.sending == 0)
        #expect(machine.unwritten == 2)
        #expect(machine.load == 4)
        #expect(Self.started(&machine).isEmpty)
        // One written: one slot frees, one send starts.
        machine.written(Self.receipt(a))
        #expect(machine.unwritten == 1)
        #expect(Self.started(&machine).count == 1)
        #expect(Self.started(&machine).isEmpty)
        #expect(machine.load == 3)
    }

    @Test func lastAnswer_endsTheGroup_whichLeavesWhenItsEndIsWritten() {
        var machine = Machine(slots: 4, highWater: 8)
        let (id, sends) = Self.claim(&machine, devices: 2)
        let started = Self.started(&machine)
        let first = machine.answered(started[0], .sent(messageName: "m0"))
        #expect(Self.kinds(first) == ["record"])
        let last = machine.answered(started[1], .retry(reason: "UNAVAILABLE", after: .seconds(30), minimumBackoff: nil))
        #expect(Self.kinds(last) == ["record", "end(settle)"])  // settled: nothing unsent, abandoned or lost
        guard case .end(let ended, .settle(let settlements)) = last[1] else { Issue.record("no settlement"); return }
        #expect(ended == id)
        // The action carries what to write: the longest wait asked for (over the 1st attempt's backoff), and why.
        #expect(settlements.map(\.id) == [1])
        #expect(settlements[0].retryDelay == .seconds(30))
        #expect(settlements[0].retryDelay == EventFate.retryDelay(eventId: 1, attempts: 1, floor: .seconds(30), backoff: Backoff()))
        #expect(settlements[0].error == "UNAVAILABLE")
        #expect(settlements[0].eventKey == "doseTaken:g")
        #expect(settlements[0].deliveryIds == sends.map(\.delivery.id))
        #expect(settlements[0].lease == sends[0].delivery.lease)
        machine.written(Self.receipt(first))
        #expect(!machine.groups.isEmpty)
        machine.written(Self.receipt(last))
        #expect(machine.groups.isEmpty)
        #expect(machine.load == 0)
    }

    @Test func groupWithoutDeliveries_endsAtOnce() {
        var machine = Machine(slots: 1, highWater: 4)
        let event = ClaimedEvent(id: 9, eventType: "DOSE_TAKEN", patientId: "p", payload: "{}", attempts: 1, ageSeconds: 0,
                                 displayName: "n", lease: LeaseToken())
        let (id, actions) = machine.open(events: [event], eventKey: "doseTaken:x", sends: [])
        #expect(Self.kinds(actions) == ["end(settle)"])
        guard case .end(_, .settle(let settlements)) = actions.first else { return }
        #expect(settlements.map(\.id) == [9])
        #expect(settlements[0].deliveryIds.isEmpty)
        machine.written(.init(groups: [id]))
        #expect(machine.groups.isEmpty)
    }

    @Test func room_countsQueuedSendingAndUnwritten() {
        var machine = Machine(slots: 2, highWater: 6)
        let (_, sends) = Self.claim(&machine, devices: 4)
        #expect(machine.hasRoom(2))
        #expect(!machine.hasRoom(3))
        let started = Self.started(&machine)
        let answers = started.flatMap { machine.answered($0, .sent(messageName: "m")) }
        // Answered but unwritten still counts: no more room than before.
        #expect(machine.load == 4)
        #expect(!machine.hasRoom(3))
        machine.written(Self.receipt(answers))
        #expect(machine.load == 2)
        #expect(machine.hasRoom(4))
        #expect(!machine.hasRoom(1_000))  // capped at the whole high-water mark, and 2 are still queued
    }

    @Test func starved_whileSendsAreQueuedBehindSlotsHeldBySendingOrUnwrittenWork() {
        var machine = Machine(slots: 2, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 3)
        let started = Self.started(&machine)
        #expect(started.count == 2)
        #expect(machine.isStarved)  // one queued, both slots sending
        let answers = started.flatMap { machine.answered($0, .sent(messageName: "m")) }
        #expect(machine.isStarved)  // answered but unwritten still holds the slots
        machine.written(Self.receipt(answers))
        #expect(!machine.isStarved)  // slots free: the queued send can start
        #expect(Self.started(&machine).count == 1)
        #expect(!machine.isStarved)  // nothing queued
    }

    @Test func roomLargerThanTheHighWaterMark_isCappedAtIt() {
        let machine = Machine(slots: 1, highWater: 4)
        #expect(machine.hasRoom(1_000))
    }

    /// Seeds of `interleave`: each a different order of claims, starts, answers (in any order, of every outcome) and
    /// partial writes. A failing case names its seed; `interleave(seed:)` replays it step by step.
    static let interleavingSeeds: [UInt64] = Array(0..<64)

    @Test(arguments: interleavingSeeds)
    func slotsBoundSendingPlusUnwritten_underAnyInterleaving(seed: UInt64) {
        _ = Self.interleave(seed: seed)
    }

    @Test func interleavings_differBySeed_andRepeatForTheSameSeed() {
        let traces = Self.interleavingSeeds.map { Self.interleave(seed: $0) }
        #expect(Set(traces).count == traces.count, "two seeds ran the same interleaving")
        #expect(Self.interleave(seed: 11) == traces[11])
    }

    /// One interleaving chosen by `seed`: 6 events of 4 deliveries through 3 slots under a high-water mark of 8,
    /// each step picked at random among those possible (claim when there is room, start what the slots allow, answer
    /// any send in flight, write the oldest few outcomes). Checks the bounds after every step and that everything is
    /// recorded and settled once at the end; returns the steps taken.
    static func interleave(seed: UInt64) -> [String] {
        enum Step: String, CaseIterable { case claim, start, answer, write }
        let (events, devices, slots, highWater) = (6, 4, 3, 8)
        var random = SplitMix64(seed: seed)
        var machine = Machine(slots: slots, highWater: highWater)
        var claimed = 0
        var inFlight: [PendingSend] = []
        var toWrite: [Machine.Action] = []
        var (recorded, settled) = (0, 0)
        var trace: [String] = []
        while trace.count < 10_000 {
            var possible: [Step] = []
            if claimed < events, machine.hasRoom(devices) { possible.append(.claim) }
            if machine.queued > 0, machine.sending + machine.unwritten < slots { possible.append(.start) }
            if !inFlight.isEmpty { possible.append(.answer) }
            if !toWrite.isEmpty { possible.append(.write) }
            guard let step = possible.randomElement(using: &random) else { break }
            switch step {
            case .claim:
                let (_, sends) = claim(&machine, key: "doseTaken:g\(claimed)", eventId: Int64(claimed), devices: devices)
                claimed += 1
                trace.append("claim")
            case .start:
                let sends = started(&machine)
                inFlight += sends
                trace.append("start \(sends.count)")
            case .answer:
                let send = inFlight.remove(at: Int.random(in: inFlight.indices, using: &random))
                let outcome = [SendOutcome.sent(messageName: "m"), .retry(reason: "UNAVAILABLE", after: .seconds(5), minimumBackoff: nil),
                               .tokenInvalid(.unregistered), .permanentFailure(reason: "INVALID_ARGUMENT")]
                    .randomElement(using: &random)!
                let actions = machine.answered(send, outcome)
                toWrite += actions
                trace.append("answer \(send.delivery.id) \(kinds(actions))")
            case .write:
                let count = Int.random(in: 1...toWrite.count, using: &random)
                let written = receipt(Array(toWrite.prefix(count)))
                machine.written(written)
                toWrite.removeFirst(count)
                recorded += written.deliveries.count
                settled += written.groups.count
                trace.append("write \(count)")
            }
            #expect(machine.sending + machine.unwritten <= slots, "seed \(seed), step \(trace.count): \(trace.last!)")
            #expect(machine.load <= highWater, "seed \(seed), step \(trace.count): \(trace.last!)")
        }
        #expect(claimed == events, "seed \(seed)")
        #expect(recorded == events * devices, "seed \(seed): every delivery's outcome written once")
        #expect(settled == events, "seed \(seed): every event's end written once")
        #expect(machine.groups.isEmpty && machine.load == 0, "seed \(seed) ended with load \(machine.load) after \(trace.count) steps")
        return trace
    }

    @Test func capacity_boundsInFlightBySlots_andInFlightPlusUnwrittenByCapacity() {
        var machine = Machine(slots: 2, highWater: 30, capacity: 4)
        for event in 0..<4 {
            let (_, sends) = Self.claim(&machine, key: "doseTaken:c\(event)", eventId: Int64(event), devices: 2)
        }
        var pending = Self.started(&machine)
        #expect(pending.count == 2)  // the slots, not the capacity, bound what is in flight
        var toWrite: [Machine.Action] = []
        for _ in 0..<2 { toWrite += machine.answered(pending.removeLast(), .sent(messageName: "m")) }
        #expect(machine.unwritten == 2)
        pending += Self.started(&machine)
        #expect(pending.count == 2)  // two more start while the first two outcomes wait for their write
        #expect(machine.sending + machine.unwritten == 4)
        #expect(machine.isStarved)  // sends queued, capacity held, two of it by unwritten outcomes
        for _ in 0..<2 { toWrite += machine.answered(pending.removeLast(), .sent(messageName: "m")) }
        #expect(Self.started(&machine).isEmpty)  // capacity held by four unwritten outcomes: nothing starts
        #expect(machine.isStarved)
        machine.written(Self.receipt(toWrite))
        #expect(machine.unwritten == 0)
        #expect(Self.started(&machine).count == 2)
    }

    /// `MAX_IN_FLIGHT` is the capacity (SPEC §3: unwritten outcomes never number more); the sends on the wire are
    /// `maxSending` within 1...`maxInFlight`, and the high-water mark and the writer's eager batch follow them.
    @Test func configuration_capacityIsMaxInFlight_slotsAreMaxSendingWithinIt() {
        var configuration = DeliveryEngineConfiguration()
        configuration.maxInFlight = 300
        #expect(configuration.sendingSlots == 300)
        configuration.maxSending = 150
        #expect(configuration.sendingSlots == 150)
        // The daemon's default: 150 on the wire, 300 held, claims up to 600, the writer eager at 75.
        let machine = DeliveryEngine.machine(for: configuration)
        #expect(machine.slots == 150)
        #expect(machine.capacity == 300)
        #expect(machine.highWater == 600)
        #expect(Completer.eagerCount(for: configuration) == 75)
        configuration.maxSending = 500
        #expect(configuration.sendingSlots == 300)
        configuration.maxSending = 0
        #expect(configuration.sendingSlots == 1)
    }

    @Test func lostEventLease_dropsItsQueuedSends_andItsEndWritesNothing() {
        var machine = Machine(slots: 1, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 3)
        let started = Self.started(&machine)
        #expect(started.count == 1)
        let held = machine.heldLeases()
        #expect(held.events.count == 1)
        #expect(held.deliveries.count == 3)
        let lost = machine.markLost(events: [.init(id: "1", lease: held.events[0].lease)], deliveries: [])
        #expect(lost == 1)
        #expect(machine.heldLeases().events.isEmpty)
        // The one in flight is answered (and recorded: the lease guard judges); the other two are never sent.
        let answer = machine.answered(started[0], .sent(messageName: "m"))
        #expect(Self.kinds(answer) == ["record"])
        machine.written(Self.receipt(answer))
        let rest = machine.next()
        #expect(Self.kinds(rest) == ["end(nothing)"])  // lost: its end writes nothing
        #expect(machine.groups.values.first?.phase == .ending(lost: true))
        machine.written(Self.receipt(rest))
        #expect(machine.groups.isEmpty)
    }

    @Test func leaseLostAfterTheGroupEnded_stopsItsRenewal_butDoesNotEndItAgain() {
        var machine = Machine(slots: 1, highWater: 8)
        let (id, sends) = Self.claim(&machine, devices: 1)
        let answer = machine.answered(Self.started(&machine)[0], .sent(messageName: "m"))
        #expect(Self.kinds(answer) == ["record", "end(settle)"])
        let held = machine.heldLeases()
        #expect(held.deliveries.count == 1)
        #expect(machine.markLost(events: [.init(id: "1", lease: held.events[0].lease)], deliveries: []) == 1)
        #expect(machine.groups[id]?.phase == .ending(lost: true))
        #expect(machine.heldLeases().events.isEmpty && machine.heldLeases().deliveries.isEmpty)
        #expect(machine.abandonRemaining().isEmpty)
        machine.written(Self.receipt(answer))
        #expect(machine.groups.isEmpty)
    }

    @Test func markLost_matchesTheLease_notOnlyTheId() {
        var machine = Machine(slots: 1, highWater: 8)
        _ = Self.claim(&machine, eventId: 7, devices: 1)
        // An extension that raced a write of event 7, which was then claimed again under a new lease.
        #expect(machine.markLost(events: [.init(id: "7", lease: LeaseToken())], deliveries: []) == 0)
        #expect(machine.heldLeases().events.count == 1)
    }

    @Test func heldLeases_includeAnsweredButUnwritten() {
        var machine = Machine(slots: 2, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 2)
        let started = Self.started(&machine)
        let actions = started.flatMap { machine.answered($0, .sent(messageName: "m")) }
        #expect(machine.heldLeases().deliveries.count == 2)
        #expect(machine.heldLeases().events.count == 1)
        machine.written(Self.receipt(actions))
        #expect(machine.heldLeases().deliveries.isEmpty)
        #expect(machine.heldLeases().events.isEmpty)
    }

    @Test func stopWhileQueued_releasesEverything() {
        var machine = Machine(slots: 1, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 2)
        let actions = machine.stop()
        #expect(Self.kinds(actions) == ["release", "release", "end(release)"])  // unsent: the event is released
        guard case .end(_, .release(let events)) = actions.last else { return }
        #expect(events.map(\.id) == [1])
        #expect(machine.next().isEmpty)
        machine.written(Self.receipt(actions))
        #expect(machine.groups.isEmpty)
        #expect(machine.hasRoom(1_000))  // a waiting claimer wakes and sees the stop
    }

    @Test func stopWhileSending_awaitsTheAnswer_thenReleasesTheEvent() {
        var machine = Machine(slots: 1, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 2)
        let started = Self.started(&machine)
        let stopped = machine.stop()
        #expect(Self.kinds(stopped) == ["release"])  // the queued one; the group waits for the one in flight
        let answer = machine.answered(started[0], .sent(messageName: "m"))
        // Released (due again at once), the sent delivery recorded SENT.
        #expect(Self.kinds(answer) == ["record", "end(release)"])
        machine.written(Self.receipt(answer))
        #expect(machine.groups.isEmpty)
    }

    @Test func stopWithAnswersUnwritten_keepsThemUntilWritten() {
        var machine = Machine(slots: 2, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 2)
        let answers = Self.started(&machine).flatMap { machine.answered($0, .sent(messageName: "m")) }
        #expect(machine.stop().isEmpty)
        #expect(machine.abandonRemaining().isEmpty)  // already ended: its outcomes are still to be written
        #expect(machine.heldLeases().deliveries.count == 2)
        machine.written(Self.receipt(answers))
        #expect(machine.groups.isEmpty)
    }

    @Test func stopDeadline_abandonsSendsInFlight_andWritesNothingForThem() {
        var machine = Machine(slots: 2, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 2)
        let started = Self.started(&machine)
        _ = machine.stop()
        // One cancelled at the deadline (its outcome unknown), one never answers before the grace ends.
        let cancelled = machine.answered(started[0], .retry(reason: "cancelled", after: nil, minimumBackoff: nil), abandoning: true)
        #expect(cancelled.isEmpty)
        #expect(machine.sending == 1)
        let rest = machine.abandonRemaining()
        #expect(Self.kinds(rest) == ["end(release)"])  // abandoned: the event is released, no outcome written
        #expect(machine.sending == 0)
        #expect(machine.answered(started[1], .sent(messageName: "late")).isEmpty)  // a late answer is ignored
        machine.written(Self.receipt(rest))
        #expect(machine.groups.isEmpty)
        #expect(machine.load == 0)
    }

    @Test func openAfterStop_releasesAtOnce() {
        var machine = Machine(slots: 1, highWater: 8)
        _ = machine.stop()
        let (_, _, actions) = Self.open(&machine, devices: 1)
        #expect(Self.kinds(actions) == ["release", "end(release)"])
    }

    @Test func notSentAnswer_releasesTheDelivery_andFreesItsSlot() {
        var machine = Machine(slots: 1, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 2)
        let started = Self.started(&machine)
        #expect(Self.kinds(machine.answered(started[0], .notSent(reason: "cancelled before start"))) == ["release"])
        #expect(machine.unwritten == 0)
        #expect(Self.started(&machine).count == 1)
    }

    @Test func writtenTwice_orForAnUnknownGroup_changesNothing() {
        var machine = Machine(slots: 1, highWater: 8)
        let (_, sends) = Self.claim(&machine, devices: 1)
        let answer = machine.answered(Self.started(&machine)[0], .sent(messageName: "m"))
        let receipt = Self.receipt(answer)
        machine.written(receipt)
        machine.written(receipt)
        machine.written(.init(deliveries: [.init(group: EventGroupID(raw: 99), delivery: "x")], groups: [EventGroupID(raw: 99)]))
        #expect(machine.unwritten == 0)
        #expect(machine.sending == 0)
        #expect(machine.groups.isEmpty)
    }

    // MARK: Lease deadlines (a worker cut off from the database)

    @Test func noSendStartsWithinTheMarginOfTheLeaseLapsing_butAnswersInFlightAreStillRecorded() {
        var machine = Machine(slots: 1, highWater: 8)
        let start = ContinuousClock.now
        let lease = Duration.seconds(6)
        let (id, sends, _) = Self.open(&machine, devices: 3, leaseDeadline: start + lease)
        // Early: the first send starts.
        let first = machine.next(now: start + .seconds(1), margin: lease / 3)
        #expect(Self.kinds(first) == ["send"])
        // Its answer comes after the margin began, with no renewal meanwhile: the outcome is still recorded...
        let answer = machine.answered(sends[0], .sent(messageName: "m"))
        #expect(Self.kinds(answer) == ["record"])
        machine.written(Self.receipt(answer))
        // ...but nothing more starts: the group is given up, and its end writes nothing (its lease lapses by itself).
        let late = machine.next(now: start + .seconds(4) + .milliseconds(1), margin: lease / 3)
        #expect(Self.kinds(late) == ["end(nothing)"])  // lost: its end writes nothing
        #expect(machine.groups[id]?.phase == .ending(lost: true))
        #expect(machine.heldLeases().events.isEmpty)
        machine.written(Self.receipt(late))
        #expect(machine.groups.isEmpty)
    }

    @Test func aConfirmedRenewal_movesTheDeadline_soSendingGoesOn() {
        var machine = Machine(slots: 1, highWater: 8)
        let start = ContinuousClock.now
        let lease = Duration.seconds(6)
        let (id, sends, _) = Self.open(&machine, devices: 2, leaseDeadline: start + lease)
        let eventLease = sends[0].delivery.lease
        // Renewed at start + 3 s (confirmed by the database): the lease now lapses at start + 9 s.
        machine.renewed(events: [.init(id: "1", lease: eventLease)], deadline: start + .seconds(3) + lease)
        #expect(Self.kinds(machine.next(now: start + .seconds(5), margin: lease / 3)) == ["send"])
        // A renewal that did not confirm this lease (another token) moves nothing.
        machine.renewed(events: [.init(id: "1", lease: LeaseToken())], deadline: start + .seconds(60))
        #expect(machine.groups[id]?.leaseDeadline == start + .seconds(9))
    }
}

/// SplitMix64: a tiny seeded generator, so an interleaving is the same on every run and every platform.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
