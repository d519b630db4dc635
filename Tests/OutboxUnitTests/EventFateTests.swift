import Foundation
@testable import Outbox
import Push
import Testing
import Timekeeping

/// One rule per fate, as tables: the claim's verdict, a send outcome's write, the settlement (in Swift and in the SQL the
/// completion statement runs: the same table through both), and the operator commands' age rule.
@Suite("Event fate")
struct EventFateTests {
    static let payload = #"{"date":"2026-02-11","slot":"morning","withinTime":true,"isPrn":false,"takenAt":"2026-02-11T08:03:27+09:00"}"#

    @Test(arguments: [
        // age (s), event type, payload, patient exists -> verdict
        (3600.0, "DOSE_TAKEN", payload, true, "send"),
        (86_401.0, "DOSE_TAKEN", payload, true, "expired"),
        (86_401.0, "NOT_A_DOSE", "{}", false, "expired"),  // an old event is expired whatever else is wrong
        (86_400.0, "DOSE_TAKEN", payload, true, "send"),  // exactly EVENT_MAX_AGE is not past it
        (10.0, "NOT_A_DOSE", payload, true, "dead"),
        (10.0, "DOSE_TAKEN", #"{"slot":"lunch"}"#, true, "dead"),
        (10.0, "DOSE_TAKEN", payload, false, "dead"),
    ])
    func atClaim(_ age: Double, _ type: String, _ payload: String, _ patientExists: Bool, _ expected: String) {
        let verdict = EventFate.atClaim(ageSeconds: age, maxAge: .seconds(86_400), eventType: type, patientId: "p1", payload: payload,
                                        patientExists: patientExists)
        switch (verdict, expected) {
        case (.send, "send"), (.expired, "expired"), (.dead, "dead"): break
        default: Issue.record("age \(age), \(type), patient \(patientExists): \(verdict), expected \(expected)")
        }
        if case .dead(let reason) = verdict, !patientExists, type == "DOSE_TAKEN" {
            #expect(reason == #"unknown patient p1: no "Patient" row"#)
        }
    }

    @Test func deliveryWrite_perOutcome() {
        let answered = Date(timeIntervalSince1970: 1_770_000_100), started = Date(timeIntervalSince1970: 1_770_000_000)
        func write(_ outcome: SendOutcome) -> DeliveryWrite? { EventFate.delivery(outcome, answeredAt: answered, sendStartedAt: started) }
        #expect(write(.sent(messageName: "projects/p/messages/1")) == .sent(messageName: "projects/p/messages/1", answeredAt: answered))
        #expect(write(.permanentFailure(reason: "THIRD_PARTY_AUTH_ERROR")) == .failed(reason: "THIRD_PARTY_AUTH_ERROR"))
        #expect(write(.retry(reason: "UNAVAILABLE", after: nil, minimumBackoff: nil)) == .pending(reason: "UNAVAILABLE", notBefore: .zero))
        // The longer of Retry-After and the QUOTA floor is what the event's delay must honour.
        #expect(write(.retry(reason: "QUOTA_EXCEEDED", after: .seconds(7), minimumBackoff: .seconds(60)))
                == .pending(reason: "QUOTA_EXCEEDED", notBefore: .seconds(60)))
        // A disable carries the send's start (the re-registration guard), never the answer's time.
        #expect(write(.tokenInvalid(.unregistered)) == .disable(.unregistered, witnessed: true, sendStartedAt: started))
        #expect(write(.tokenInvalid(.notFound, witnessed: false)) == .disable(.notFound, witnessed: false, sendStartedAt: started))
        #expect(write(.notSent(reason: "stop")) == nil)
    }

    /// The one place a write becomes the completion statement's columns: each write's kind, detail and time; Google's
    /// plain 404 is UNREGISTERED in the ledger and says which 404 in `"lastError"`.
    @Test func deliveryWrite_columns() {
        let answered = Date(timeIntervalSince1970: 1_770_000_100), started = Date(timeIntervalSince1970: 1_770_000_000)
        let sent = DeliveryWrite.sent(messageName: "m", answeredAt: answered).columns
        #expect(sent.kind == .sent && sent.detail == "m" && sent.sentAt == 1_770_000_100 && sent.sendStartedAt == nil)
        let failed = DeliveryWrite.failed(reason: "THIRD_PARTY_AUTH_ERROR").columns
        #expect(failed.kind == .failed && failed.detail == "THIRD_PARTY_AUTH_ERROR" && failed.sentAt == nil && failed.sendStartedAt == nil)
        let pending = DeliveryWrite.pending(reason: "UNAVAILABLE", notBefore: .seconds(3)).columns
        #expect(pending.kind == .pending && pending.detail == "UNAVAILABLE" && pending.sentAt == nil)
        let disable = DeliveryWrite.disable(.notFound, witnessed: true, sendStartedAt: started).columns
        #expect(disable.kind == .disable && disable.detail == "UNREGISTERED: 404 NOT_FOUND without an FcmError detail")
        #expect(disable.sentAt == nil && disable.sendStartedAt == 1_770_000_000)
        #expect(DisablingAnswer.notFound.deviceCode == "UNREGISTERED" && DisablingAnswer.invalidToken.deviceCode == "INVALID_ARGUMENT")
    }

    /// A settlement the database refuses alone goes DEAD with the refusal (the completer only writes it).
    @Test func settlementRefused_isDeadWithTheRefusal() {
        let settlement = EventSettlement(id: 7, eventKey: "k", patientId: "p", lease: LeaseToken(), retryDelay: .seconds(1))
        let refused = EventFate.settlementRefused(settlement, sqlState: "22P02", message: "invalid input syntax")
        #expect(refused.id == 7 && refused.lease == settlement.lease && refused.status == .dead)
        #expect(refused.reason == "outcome refused by the database: SQLSTATE 22P02: invalid input syntax")
        #expect(EventFate.settlementRefused(settlement, sqlState: nil, message: nil).reason == "outcome refused by the database")
    }

    /// What a refused retry's delivery says (a deleted device reads as a disabled one).
    @Test func notSent_perRefusal() {
        #expect(EventFate.notSent(.deviceDeleted) == "device disabled before send")
        #expect(EventFate.notSent(.deviceDisabled) == "device disabled before send")
        #expect(EventFate.notSent(.linkNotActive) == EventFate.linkNotActiveBeforeSend)
        #expect(EventFate.notSent(.tokenSuperseded) == EventFate.tokenSupersededBeforeSend)
    }

    /// (deliveries pending, attempts, max attempts) -> status.
    static let settlements: [(Bool, Int, Int, OutboxStatus)] = [
        (false, 1, 10, .done), (false, 10, 10, .done), (false, 12, 10, .done),
        (true, 1, 10, .pending), (true, 9, 10, .pending), (true, 10, 10, .dead), (true, 11, 10, .dead), (true, 1, 1, .dead),
    ]

    @Test func settled_inSwift() {
        for (pending, attempts, maxAttempts, expected) in Self.settlements {
            #expect(EventFate.settled(deliveriesPending: pending, attempts: attempts, maxAttempts: maxAttempts) == expected,
                    "pending \(pending), attempts \(attempts)/\(maxAttempts)")
        }
    }

    /// A settled event still pending is due again after its backoff, or after the longest wait a delivery asked for.
    @Test func retryDelay_isTheBackoff_orTheLongestWaitAskedFor() {
        let backoff = Backoff(base: .seconds(2), cap: .seconds(900))
        let plain = EventFate.retryDelay(eventId: 7, attempts: 3, floor: .zero, backoff: backoff)
        #expect(plain >= .seconds(4) && plain <= .seconds(8))
        #expect(EventFate.retryDelay(eventId: 7, attempts: 3, floor: .seconds(60), backoff: backoff) == .seconds(60))
        #expect(EventFate.retryDelay(eventId: 7, attempts: 3, floor: .zero, backoff: backoff) == plain)  // no system jitter
    }

    @Test func operatorCommands_ageRule() {
        #expect(EventFate.redrive(ageSeconds: 2 * 3600, maxAge: .seconds(86_400)) == .redrive)
        #expect(EventFate.redrive(ageSeconds: 30 * 3600, maxAge: .seconds(86_400)) == .skipPastMaxAge)
        let day = Duration.seconds(86_400)
        #expect(EventFate.resend(eventAgeSeconds: 3600, maxAge: day, refusal: nil) == .resend)
        #expect(EventFate.resend(eventAgeSeconds: 3600, maxAge: day, refusal: .deviceDisabled)
            == .skip(reason: "device disabled (a disabled device stays disabled; see `devices enable`)"))
        #expect(EventFate.resend(eventAgeSeconds: 3600, maxAge: day, refusal: .deviceDeleted) == .skip(reason: "device deleted"))
        #expect(EventFate.resend(eventAgeSeconds: 3600, maxAge: day, refusal: .linkNotActive)
            == .skip(reason: "the caregiver's link to the patient is no longer ACTIVE"))
        #expect(EventFate.resend(eventAgeSeconds: 3600, maxAge: day, refusal: .tokenSuperseded)
            == .skip(reason: "another registration of this token was seen more recently (the phone changed hands)"))
        // The age comes first: an old event is not resent whoever its recipients are.
        #expect(EventFate.resend(eventAgeSeconds: 30 * 3600, maxAge: day, refusal: nil) == .skip(reason: "event past EVENT_MAX_AGE (24.0h): it would only expire"))
        #expect(EventFate.resend(eventAgeSeconds: 30 * 3600, maxAge: day, refusal: .deviceDisabled)
            == .skip(reason: "event past EVENT_MAX_AGE (24.0h): it would only expire"))
    }

    @Test func refusals_nameTheWriteAndTheSQLState() {
        #expect(EventFate.refused(.fanOut, sqlState: "54000", message: "index row size 9000 exceeds maximum")
            == "fan-out refused by the database: SQLSTATE 54000: index row size 9000 exceeds maximum")
        #expect(EventFate.refused(.outcome, sqlState: nil, message: "x") == "outcome refused by the database: SQLSTATE ?: x")
    }

    /// A fan-out the database did not finish this time (a lock wait past lock_timeout, a deadlock, a serialization
    /// failure, a statement timeout) is a failed attempt with the event's backoff, DEAD only when the attempts run out;
    /// a statement refused for what is in it goes DEAD at once.
    @Test(arguments: ["55P03", "40P01", "40001", "57014"])
    func fanOutNotFinished_isAFailedAttempt_untilTheAttemptsRunOut(sqlState: String) {
        let backoff = Backoff(base: .seconds(2), cap: .seconds(900))
        let message = "canceling statement due to lock timeout"
        let retry = EventFate.fanOutFailed(eventId: 7, attempts: 1, maxAttempts: 10, sqlState: sqlState, message: message, backoff: backoff)
        #expect(retry == .retry(delay: EventFate.retryDelay(eventId: 7, attempts: 1, floor: .zero, backoff: backoff),
                                reason: "fan-out not finished by the database, tried again: SQLSTATE \(sqlState): \(message)"))
        #expect(EventFate.fanOutFailed(eventId: 7, attempts: 10, maxAttempts: 10, sqlState: sqlState, message: message, backoff: backoff)
            == .dead(reason: "fan-out refused by the database: SQLSTATE \(sqlState): \(message)"))
    }

    @Test func fanOutRefusedForWhatIsInIt_isDeadAtOnce() {
        let backoff = Backoff()
        #expect(EventFate.fanOutFailed(eventId: 7, attempts: 1, maxAttempts: 10, sqlState: "54000", message: "index row size 9000 exceeds maximum",
                                       backoff: backoff)
            == .dead(reason: "fan-out refused by the database: SQLSTATE 54000: index row size 9000 exceeds maximum"))
        #expect(EventFate.fanOutFailed(eventId: 7, attempts: 1, maxAttempts: 10, sqlState: nil, message: "x", backoff: backoff)
            == .dead(reason: "fan-out refused by the database: SQLSTATE ?: x"))
    }
}
