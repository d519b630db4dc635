import FoundationEssentials
import Postgres
import Push
import Timekeeping

/// Every decision about what becomes of an outbox event or a delivery, in one place: the claimer, the fan-out's
/// refusal, the writer, `redrive` and `resend` all ask here, and each outcome has one SQL write (who is a recipient is
/// `Recipients`' SQL). Pure functions, table-tested (`EventFateTests`).
public enum EventFate {
    // MARK: Age

    /// An event created longer ago than `EVENT_MAX_AGE` would only expire: it is not sent, redriven or resent.
    public static func isPastMaxAge(ageSeconds: Double, maxAge: Duration) -> Bool { ageSeconds > maxAge.asSeconds }

    // MARK: At claim

    /// What a claim makes of one event.
    public enum AtClaim: Sendable, Equatable {
        /// Valid and fresh: fan it out and send.
        case send(DoseTakenEvent)
        /// Too old: `EXPIRED`, not sent.
        case expired(reason: String)
        /// Bad input: `DEAD` with the reason, redrivable once the input is fixed.
        case dead(reason: String)
    }

    /// The reason written to an expired event.
    public static let expiredReason = "older than EVENT_MAX_AGE when claimed; not sent"

    /// The claim's verdict: age first (an old event is never judged further), then the payload, then the patient.
    public static func atClaim(ageSeconds: Double, maxAge: Duration, eventType: String, patientId: String, payload: String,
                               patientExists: Bool) -> AtClaim {
        if isPastMaxAge(ageSeconds: ageSeconds, maxAge: maxAge) { return .expired(reason: expiredReason) }
        let event: DoseTakenEvent
        do { event = try DoseTakenEvent.parse(eventType: eventType, patientId: patientId, payload: payload) } catch {
            return .dead(reason: error.reason)
        }
        guard patientExists else { return .dead(reason: "unknown patient \(patientId.prefix(64)): no \"Patient\" row") }
        return .send(event)
    }

    // MARK: Refused by the database

    /// Which write the database refused.
    public enum Refusal: String, Sendable {
        case fanOut = "fan-out"
        case outcome = "outcome"
    }

    /// `"fan-out refused by the database: SQLSTATE 54000: index row size … exceeds …"`: the event goes DEAD with this.
    public static func refused(_ what: Refusal, sqlState: String?, message: String) -> String {
        "\(what.rawValue) refused by the database: SQLSTATE \(sqlState ?? "?"): \(message.prefix(300))"
    }

    /// What a fan-out the database did not finish makes of its event.
    public enum FanOutFailure: Sendable, Equatable {
        /// A failed attempt: due again after `delay`, the reason in `"lastError"`.
        case retry(delay: Duration, reason: String)
        /// `DEAD` with the reason: bad input (the statement itself was refused), or the attempts ran out.
        case dead(reason: String)
    }

    /// A fan-out the database did not finish (`attempts` includes this one): a transient failure
    /// (`PostgresError.transientSQLStates`: a lock wait past `lock_timeout` while the API holds a recipient's row, a
    /// deadlock, a statement timeout) is a failed attempt, retried after the event's backoff until the attempts run out;
    /// anything else is the event's own (an index row too large, a constraint), which would fail the same way every
    /// time, so it goes DEAD at once.
    public static func fanOutFailed(eventId: Int64, attempts: Int, maxAttempts: Int, sqlState: String?, message: String,
                                    backoff: Backoff) -> FanOutFailure {
        let reason = refused(.fanOut, sqlState: sqlState, message: message)
        guard let sqlState, PostgresError.transientSQLStates.contains(sqlState), attempts < maxAttempts else { return .dead(reason: reason) }
        return .retry(delay: retryDelay(eventId: eventId, attempts: attempts, floor: .zero, backoff: backoff),
                      reason: "fan-out not finished by the database, tried again: SQLSTATE \(sqlState): \(message.prefix(300))")
    }

    // MARK: After an answer

    /// The row write an answer calls for (`DeliveryWrite`), decided here once: the engine's machine calls it as it turns
    /// the answer into its `.record` action, and the writer writes what it says. nil: never transmitted (held during a
    /// pause when the stop came), so nothing is written and the delivery is given back.
    public static func delivery(_ outcome: SendOutcome, answeredAt: Date, sendStartedAt: Date) -> DeliveryWrite? {
        switch outcome {
        case .sent(let name): .sent(messageName: name, answeredAt: answeredAt)
        case .permanentFailure(let reason): .failed(reason: reason)
        case .retry(let reason, let after, let minimum): .pending(reason: reason, notBefore: max(after ?? .zero, minimum ?? .zero))
        case .tokenInvalid(let answer, let witnessed): .disable(answer, witnessed: witnessed, sendStartedAt: sendStartedAt)
        case .notSent: nil
        }
    }

    // MARK: Fanned out again

    /// A PENDING delivery left by an earlier attempt (or a crashed worker) is sent under the new lease when its event is
    /// fanned out again only while its device is still a recipient (`Recipients.refusal`: recipients are decided when
    /// the push leaves); otherwise it ends FAILED with the reason `notSent` gives (a disabled device stays disabled;
    /// `devices enable` is the way back). The fan-out statement writes it (`DeliveryFanOut.refusalSQL`).
    public static let deviceDisabledBeforeSend = "device disabled before send"
    public static let linkNotActiveBeforeSend = "not sent: the caregiver's link to the patient is no longer ACTIVE"
    public static let tokenSupersededBeforeSend =
        "not sent: another registration of this token was seen more recently (the phone changed hands, or pushes were switched off there)"

    /// The `"lastError"` of a delivery the fan-out ends FAILED for `refusal` (a deleted device reads as a disabled one).
    package static func notSent(_ refusal: Recipients.Refusal) -> String {
        switch refusal {
        case .deviceDeleted, .deviceDisabled: deviceDisabledBeforeSend
        case .linkNotActive: linkNotActiveBeforeSend
        case .tokenSuperseded: tokenSupersededBeforeSend
        }
    }

    // MARK: At settlement

    /// An event once every delivery of this attempt was answered: `.done` when no delivery of its key is PENDING
    /// (whatever mix of SENT and FAILED); else `.pending` (due again after its delay) while attempts are left, `.dead`
    /// once none is. The completion statement applies it in SQL, where `deliveriesPending` is known
    /// (`settledStatusSQL`); `EventFateTests` runs one table through both.
    public static func settled(deliveriesPending: Bool, attempts: Int, maxAttempts: Int) -> OutboxStatus {
        if !deliveriesPending { return .done }
        return attempts >= maxAttempts ? .dead : .pending
    }

    /// `settled` as a SQL expression over the columns named (the completion statement's verdict).
    public static func settledStatusSQL(pending: String, attempts: String, maxAttempts: String) -> String {
        "CASE WHEN NOT \(pending) THEN '\(OutboxStatus.done.rawValue)' WHEN \(attempts) >= \(maxAttempts) THEN '\(OutboxStatus.dead.rawValue)' "
            + "ELSE '\(OutboxStatus.pending.rawValue)' END"
    }

    /// A settlement the database refused on its own (its flush was written again item by item): the event would be
    /// claimed and refused again forever, so it is finished `DEAD` with the refusal. The completer writes this; it decides nothing.
    public static func settlementRefused(_ settlement: EventSettlement, sqlState: String?, message: String?) -> FinishedEvent {
        FinishedEvent(id: settlement.id, lease: settlement.lease, status: .dead,
                      reason: message.map { refused(.outcome, sqlState: sqlState, message: $0) } ?? "outcome refused by the database")
    }

    /// When a settled event still pending is due again: its backoff after `attempts`, or the longest wait a delivery
    /// asked for (`floor`), whichever is longer. The jitter is spread over the event and attempt (no system call per event).
    public static func retryDelay(eventId: Int64, attempts: Int, floor: Duration, backoff: Backoff) -> Duration {
        max(backoff.delay(afterAttempt: attempts, jitter: Backoff.jitter(seed: UInt64(bitPattern: eventId) &* 31 &+ UInt64(attempts))), floor)
    }

    // MARK: Operator commands

    /// What `redrive` does with a DEAD event.
    public enum Redrive: Sendable, Equatable {
        case redrive
        case skipPastMaxAge
    }

    public static func redrive(ageSeconds: Double, maxAge: Duration) -> Redrive {
        isPastMaxAge(ageSeconds: ageSeconds, maxAge: maxAge) ? .skipPastMaxAge : .redrive
    }

    /// What `resend` does with a FAILED delivery: resend it, or skip it with the reason.
    public enum Resend: Sendable, Equatable {
        case resend
        case skip(reason: String)
    }

    /// `resend`'s verdict on a FAILED delivery of an event `eventAgeSeconds` old whose device `Recipients.refusal`
    /// judged (`refusal` nil: still a recipient).
    package static func resend(eventAgeSeconds: Double, maxAge: Duration, refusal: Recipients.Refusal?) -> Resend {
        if isPastMaxAge(ageSeconds: eventAgeSeconds, maxAge: maxAge) {
            return .skip(reason: "event past EVENT_MAX_AGE (\(DurationText.age(seconds: maxAge.asSeconds))): it would only expire")
        }
        switch refusal {
        case nil: return .resend
        case .deviceDeleted: return .skip(reason: "device deleted")
        case .deviceDisabled: return .skip(reason: "device disabled (a disabled device stays disabled; see `devices enable`)")
        case .linkNotActive: return .skip(reason: "the caregiver's link to the patient is no longer ACTIVE")
        case .tokenSuperseded: return .skip(reason: "another registration of this token was seen more recently (the phone changed hands)")
        }
    }
}

/// A duration for people: `45s`, `12m`, `3.5h`, `2.0d` (the operator commands' text and the fates' reasons).
public enum DurationText {
    public static func age(seconds: Double) -> String {
        if seconds < 120 { return "\(Int(seconds.rounded()))s" }
        if seconds < 7200 { return "\(Int((seconds / 60).rounded()))m" }
        if seconds < 172_800 { return oneDecimal(seconds / 3600) + "h" }
        return oneDecimal(seconds / 86_400) + "d"
    }

    /// `value` with one decimal: `3.5`.
    public static func oneDecimal(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
}
