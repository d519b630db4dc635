/// One DOSE_TAKEN push to one device: everything its FCM message needs.
public struct DoseTakenPush: Sendable, Hashable {
    /// The FCM registration token (a secret: log `Redact.token` of it only).
    public var token: String
    /// `doseTaken:…` key of the event; the `apns-collapse-id` derives from it.
    public var eventKey: String
    public var patientId: String
    /// The patient's display name (never logged).
    public var displayName: String
    /// `YYYY-MM-DD`.
    public var date: String
    /// `morning` | `noon` | `evening` | `bedtime`.
    public var slot: String
    /// nil when the payload had none; sent as `""`.
    public var recordingGroupId: String?
    public var withinTime: Bool
    /// `apns-expiration`: the outbox row's `"createdAt"` + `EVENT_MAX_AGE`, in UNIX seconds (the same on every
    /// retry); APNs drops the push if the phone cannot be reached before then. nil: no expiration header.
    public var expiration: Int64?

    public init(token: String, eventKey: String, patientId: String, displayName: String, date: String,
                slot: String, recordingGroupId: String?, withinTime: Bool, expiration: Int64? = nil) {
        self.token = token
        self.eventKey = eventKey
        self.patientId = patientId
        self.displayName = displayName
        self.date = date
        self.slot = slot
        self.recordingGroupId = recordingGroupId
        self.withinTime = withinTime
        self.expiration = expiration
    }
}

/// What became of one send (docs/operations.md, "When FCM fails").
public enum SendOutcome: Sendable, Equatable {
    /// FCM accepted it; `messageName` is FCM's `name` as returned.
    case sent(messageName: String)
    /// Try again later: after `after` when FCM said so (Retry-After), else the caller's backoff.
    /// `minimumBackoff` is a floor for the caller's backoff (60 s for QUOTA_EXCEEDED without Retry-After).
    case retry(reason: String, after: Duration?, minimumBackoff: Duration?)
    /// The token is dead (`answer`: UNREGISTERED, a stale token's SENDER_ID_MISMATCH, invalid token): disable the device.
    /// `witnessed`: FCM accepted a push for a known-good token with the same key after this send began (SPEC §3, "a
    /// disable needs a witness"). false only where no token of the project ever received a push: such disables share
    /// the fleet's small allowance (`OutboxStore.unwitnessedDisableCap`).
    case tokenInvalid(DisablingAnswer, witnessed: Bool = true)
    /// Will never succeed as is (payload bug, APNs credentials): fail, keep the device, alert.
    case permanentFailure(reason: String)
    /// Never transmitted (held during a pause when the stop came): nothing happened, the delivery is given back.
    case notSent(reason: String)
}

/// An FCM answer that says a token is dead, as the classifier read it; the raw value names it in `/readyz`, the log and the
/// metrics.
public enum DisablingAnswer: String, Sendable, Equatable, CaseIterable {
    /// 404 with the FcmError detail UNREGISTERED.
    case unregistered = "UNREGISTERED"
    /// Google's plain 404 NOT_FOUND without an FcmError detail (for one device, UNREGISTERED; for every device, the project).
    case notFound = "NOT_FOUND"
    /// 400 INVALID_ARGUMENT naming the registration token.
    case invalidToken = "INVALID_ARGUMENT"
    /// 403 SENDER_ID_MISMATCH.
    case senderIdMismatch = "SENDER_ID_MISMATCH"

    /// The code a device disabled for it is recorded under (`"PushDeviceDisabled".reason`, `devices --reason`): a plain
    /// NOT_FOUND is UNREGISTERED for the device.
    public var deviceCode: String { self == .notFound ? Self.unregistered.rawValue : rawValue }

    /// What the delivery's `"lastError"`, the ledger's and the log say.
    public var reason: String { self == .notFound ? "UNREGISTERED: 404 NOT_FOUND without an FcmError detail" : rawValue }
}

/// Sends pushes. The production implementation is `FCMSender`; anything conforming can drive the pipeline.
///
/// The interface is a callback rather than `async`: the delivery engine starts thousands of sends a
/// second, and a completion called where the answer arrives (the HTTP driver thread) costs no task,
/// no continuation and no thread hop per send.
public protocol PushSender: Sendable {
    /// Starts one send. `completion` is called exactly once with the classified outcome, on any thread,
    /// possibly before `start` returns; it must not block. Never fails: transport errors are `.retry`.
    func start(_ push: DoseTakenPush, completion: @escaping @Sendable (SendOutcome) -> Void)
    /// Answers every send not yet transmitted (held during a pause) with `.notSent`, at once (stop).
    func cancelWaiting()
    /// Abandons every send in flight (the stop deadline passed): each completes promptly with `.retry`.
    func cancelInFlight()
}

extension PushSender {
    /// Sends one push and returns its outcome.
    public func send(_ push: DoseTakenPush) async -> SendOutcome {
        await withCheckedContinuation { continuation in
            start(push) { continuation.resume(returning: $0) }
        }
    }
}
