import FCM
import Foundation
import Synchronization

/// The events this engine holds between claim and settlement, grouped by eventKey within a claim.
/// It knows which deliveries are still unanswered, so it can settle an event the moment its last
/// delivery is answered, tell the heartbeat which leases to extend, and refuse to start a send
/// whose lease was lost.
final class EventLedger: Sendable {
    /// The events of one claim sharing an eventKey (normally one) and their unanswered deliveries.
    struct Group: Sendable {
        var events: [ClaimedEvent]
        var eventKey: String
        /// Delivery id → lease, for deliveries queued or in flight.
        var open: [String: LeaseToken]
        /// A delivery was never sent (stop): the events are released, not settled.
        var unsent = false
        /// A send was abandoned at the stop deadline: its outcome is unknown, its lease is kept.
        var abandoned = false
        /// The heartbeat found the event's lease taken over: nothing more is sent or written for it.
        var lost = false
        /// Longest wait any delivery asked for (Retry-After, QUOTA floor), and why.
        var retryFloor: Duration = .zero
        var retryReason: String?
    }

    private struct State {
        var groups: [EventGroupID: Group] = [:]
        var lostDeliveries: Set<String> = []
        var nextId = 0
        var emptyWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Groups in progress.
    var count: Int { state.withLock { $0.groups.count } }

    /// Starts tracking a group; returns its id.
    func open(events: [ClaimedEvent], eventKey: String, deliveries: [ClaimedDelivery]) -> EventGroupID {
        var open: [String: LeaseToken] = [:]
        open.reserveCapacity(deliveries.count)
        for delivery in deliveries { open[delivery.id] = delivery.lease }
        return state.withLock { state in
            let id = EventGroupID(raw: state.nextId)
            state.nextId &+= 1
            state.groups[id] = Group(events: events, eventKey: eventKey, open: open)
            return id
        }
    }

    /// Whether a queued delivery may still be sent (its event's and its own lease are held).
    func isSendable(_ send: PendingSend) -> Bool {
        state.withLock { state in
            guard let group = state.groups[send.group], !group.lost else { return false }
            return !state.lostDeliveries.contains(send.delivery.id)
        }
    }

    /// How one delivery ended for the ledger.
    enum Answer {
        case answered(SendOutcome)
        /// Never sent (stop, lost lease).
        case notSent
        /// In flight at the stop deadline: FCM may have it.
        case abandoned
    }

    /// Records a delivery's end; returns the group when it was the group's last open delivery.
    func close(_ group: EventGroupID, delivery: String, _ answer: Answer) -> Group? {
        state.withLock { state in
            guard var entry = state.groups[group] else { return nil }
            entry.open.removeValue(forKey: delivery)
            state.lostDeliveries.remove(delivery)
            switch answer {
            case .answered(.retry(let reason, let after, let minimum)):
                let floor = max(after ?? .zero, minimum ?? .zero)
                if floor >= entry.retryFloor || entry.retryReason == nil {
                    entry.retryFloor = max(entry.retryFloor, floor)
                    entry.retryReason = reason
                }
            case .answered: break
            case .notSent: entry.unsent = true
            case .abandoned: entry.abandoned = true
            }
            guard entry.open.isEmpty else {
                state.groups[group] = entry
                return nil
            }
            state.groups.removeValue(forKey: group)
            Self.resumeIfEmpty(&state)
            return entry
        }
    }

    /// Removes a group that has nothing open (no deliveries) and returns it.
    func take(_ group: EventGroupID) -> Group? {
        state.withLock { state in
            guard let entry = state.groups[group], entry.open.isEmpty else { return nil }
            state.groups.removeValue(forKey: group)
            Self.resumeIfEmpty(&state)
            return entry
        }
    }

    /// Removes every remaining group (stop, after the deadline).
    func takeAll() -> [Group] {
        state.withLock { state in
            let all = Array(state.groups.values)
            state.groups.removeAll()
            Self.resumeIfEmpty(&state)
            return all
        }
    }

    /// The leases the heartbeat must extend: every held event and every open delivery.
    func heldLeases() -> (events: [(id: Int64, lease: LeaseToken)], deliveries: [(id: String, lease: LeaseToken)]) {
        state.withLock { state in
            var events: [(id: Int64, lease: LeaseToken)] = []
            var deliveries: [(id: String, lease: LeaseToken)] = []
            for group in state.groups.values where !group.lost {
                for event in group.events { events.append((event.id, event.lease)) }
                for (id, lease) in group.open { deliveries.append((id, lease)) }
            }
            return (events, deliveries)
        }
    }

    /// Marks what the heartbeat could not extend as lost; returns how many events were lost.
    func markLost(checkedEvents: [Int64], keptEvents: Set<Int64>, checkedDeliveries: [String], keptDeliveries: Set<String>) -> Int {
        let lostEvents = Set(checkedEvents.filter { !keptEvents.contains($0) })
        let lostDeliveries = checkedDeliveries.filter { !keptDeliveries.contains($0) }
        return state.withLock { state in
            var count = 0
            if !lostEvents.isEmpty {
                for (id, group) in state.groups where group.events.contains(where: { lostEvents.contains($0.id) }) {
                    state.groups[id]?.lost = true
                    count += 1
                }
            }
            for id in lostDeliveries { state.lostDeliveries.insert(id) }
            return count
        }
    }

    /// Returns once no group is in progress.
    func waitUntilEmpty() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.groups.isEmpty { return true }
                state.emptyWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    private static func resumeIfEmpty(_ state: inout State) {
        guard state.groups.isEmpty, !state.emptyWaiters.isEmpty else { return }
        let waiters = state.emptyWaiters
        state.emptyWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }
}
