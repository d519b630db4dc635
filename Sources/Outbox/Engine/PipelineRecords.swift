import FoundationEssentials
import Push

// The records an outbox row passes through, in the order it walks the pipeline:
// claim (`ClaimedEvent`) → validate (`DoseTakenEvent`) → fan-out (`ClaimedDelivery`) → send
// (`PendingSend` → `SendOutcome`) → record (`DeliveryWrite`) → settle (`EventSettlement`).

/// The lease a claim holds on its events and deliveries. Every write is guarded by it, so a
/// worker that lost its lease changes nothing.
public struct LeaseToken: Hashable, Sendable, CustomStringConvertible {
    /// The UUID in PostgreSQL's text form, computed once per claim.
    public let text: String

    public init() { text = UUID().uuidString }
    public var description: String { text }
}

/// A claimed outbox row.
public struct ClaimedEvent: Sendable {
    public var id: Int64
    public var eventType: String
    public var patientId: String
    public var payload: String
    /// Attempts including this one.
    public var attempts: Int
    /// Seconds since the row's `"createdAt"` when claimed, by the database's clock (`EventFate` judges it against
    /// EVENT_MAX_AGE).
    public var ageSeconds: Double
    /// The patient's `"displayName"`, nil when no `"Patient"` row has this id (never logged).
    public var displayName: String?
    public var lease: LeaseToken
    /// The outbox row's `"createdAt"` (when the dose was recorded): the start of the caregiver's wait, and with
    /// `EVENT_MAX_AGE` the push's `apns-expiration`.
    public var createdAt: Date?
}

/// A leased PENDING delivery ready to send.
public struct ClaimedDelivery: Sendable {
    public var id: String
    public var eventKey: String
    /// The patient whose event this delivery carries (an event is its patient and key).
    public var patientId: String
    public var deviceId: String
    public var token: String
    /// Database time when the delivery was leased (the send's start for the re-registration guard).
    public var claimedAt: Date
    public var lease: LeaseToken
}

/// An outbox event's `status`, the one type of the column: the raw values are its strings, a contract with the web API
/// (docs/database.md).
public enum OutboxStatus: String, Sendable, CaseIterable {
    /// Due (again) at `"availableAt"`, or leased.
    case pending = "PENDING"
    /// No delivery of its key is PENDING.
    case done = "DONE"
    /// Bad input or attempts exhausted: kept for inspection, redrivable.
    case dead = "DEAD"
    /// Older than EVENT_MAX_AGE when claimed.
    case expired = "EXPIRED"
}

/// A delivery's `status`; the raw values are the column's.
public enum DeliveryStatus: String, Sendable, CaseIterable {
    case pending = "PENDING"
    case sent = "SENT"
    case failed = "FAILED"
}

/// An event finished without sending (bad input, too old).
public struct FinishedEvent: Sendable {
    public var id: Int64
    public var lease: LeaseToken
    /// `.dead` (bad input) or `.expired` (too old).
    public var status: OutboxStatus
    /// Written to `"lastError"`: names what was wrong.
    public var reason: String
}

/// An event whose deliveries were all answered: DONE, or due again after `retryDelay`, or DEAD.
public struct EventSettlement: Sendable {
    public var id: Int64
    public var eventKey: String
    /// The event's patient: only deliveries of this patient and key decide the event.
    public var patientId: String
    public var lease: LeaseToken
    /// Delay before the next attempt if deliveries are still pending.
    public var retryDelay: Duration
    /// Recorded as `"lastError"` when the event stays PENDING or goes DEAD.
    public var error: String?
    /// The deliveries this attempt fanned out for the key: each must be in the table for the event to be DONE (a
    /// failover can lose the fan-out that inserted them and the writes that recorded them, and leave the claim).
    public var deliveryIds: [String]

    public init(id: Int64, eventKey: String, patientId: String, lease: LeaseToken, retryDelay: Duration, error: String? = nil,
                deliveryIds: [String] = []) {
        self.id = id
        self.eventKey = eventKey
        self.patientId = patientId
        self.lease = lease
        self.retryDelay = retryDelay
        self.error = error
        self.deliveryIds = deliveryIds
    }
}

/// What one answered send writes to its delivery row, decided once, where the answer becomes the engine's `.record`
/// action (`EventFate.delivery`, called by `EngineStateMachine.answered`), and written as it is (`OutboxStore.plan`), the
/// way River's executor hands its completer `JobSetStateCompleted` or `JobSetStateErrorRetryable`. The row itself (id,
/// lease, key, device) is the send's `ClaimedDelivery`.
public enum DeliveryWrite: Sendable, Equatable {
    /// `SENT` with FCM's message name; `"sentAt"` is `answeredAt`, when the worker had FCM's answer (its wall clock), not
    /// when the row is written (the writer may linger to gather a batch, and a busy database delays it further).
    case sent(messageName: String, answeredAt: Date)
    /// `FAILED` with the reason; the device stays enabled (a payload bug, APNs credentials).
    case failed(reason: String)
    /// `PENDING` again with the reason, sent again with its event; `notBefore`: the least wait it asked for (Retry-After,
    /// the QUOTA_EXCEEDED floor), which the event's retry delay honours.
    case pending(reason: String, notBefore: Duration)
    /// `FAILED`, and the device disabled and recorded in the ledger under `answer.deviceCode`, unless the app re-registered
    /// it after `sendStartedAt` (when the delivery was leased, by the database's clock); an unwitnessed one (a new
    /// deployment's) stays `PENDING` when the fleet's allowance is used up (`OutboxStore.disableDevicesQuery`).
    case disable(DisablingAnswer, witnessed: Bool, sendStartedAt: Date)
}

/// One send waiting for a slot: the delivery, its push, and the event group it belongs to. Immutable and
/// shared: it passes through the queue, the send's callback, the answer and the write, and a copy of the
/// reference is one retain where a copy of its fifteen strings was fifteen.
final class PendingSend: Sendable {
    let group: EventGroupID
    /// How logs name the send's event: its outbox ids (one; two rows of one patient and key give two), never its key,
    /// which can carry the patient and the dose's time. One array shared by the group's sends, formatted only when a
    /// line is logged (`outboxId`).
    let outboxIds: [Int64]
    let delivery: ClaimedDelivery
    let push: DoseTakenPush
    /// The event's `"createdAt"`, for `push_delivery_latency_seconds`.
    let createdAt: Date?

    /// The outbox ids as a log value: `1234`, or `1234,1240`.
    var outboxId: String { outboxIds.map(String.init).joined(separator: ",") }

    init(group: EventGroupID, outboxIds: [Int64], delivery: ClaimedDelivery, push: DoseTakenPush, createdAt: Date? = nil) {
        self.group = group
        self.outboxIds = outboxIds
        self.delivery = delivery
        self.push = push
        self.createdAt = createdAt
    }
}

/// Identifies the events of one claim that share a patient and an eventKey (normally one event).
struct EventGroupID: Hashable, Sendable {
    var raw: Int
}
