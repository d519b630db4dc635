import FoundationEssentials
import JSON
import Outbox
import Postgres
import TextSupport
import Timekeeping

/// `resend (--event ID | --delivery ID) [--dry-run]`: FAILED deliveries sent again once their cause is fixed (an APNs
/// credential, a payload bug), at most once per (eventKey, device) as always: the same delivery row goes back to
/// PENDING and its event is claimed again. A disabled device stays disabled and is skipped.
struct ResendCommand: OperatorCommand {
    static let name = "resend"
    static let summary = "Send FAILED deliveries of a recent event again (after fixing their cause); --dry-run to preview."
    static let help = """
        Usage: medication-worker resend (--event ID | --delivery ID) [--dry-run] [--json]

        Sends FAILED deliveries again once their cause is fixed (THIRD_PARTY_AUTH_ERROR after an APNs
        credential was fixed, an INVALID_ARGUMENT payload bug after an upgrade). The delivery rows go back to
        PENDING and the event is claimed again: still at most one push per (event key, device).
        Only the event's own patient's deliveries: two patients' events can share a key.
        Skipped, with the reason: deliveries to a disabled device (a dead token stays disabled; see
        `devices enable`), to a caregiver whose link to the patient is no longer ACTIVE, to a device that
        no longer speaks for its token (another registration of it was seen more recently), and every
        delivery of an event older than EVENT_MAX_AGE (it would only expire).
        Exit status 1 when nothing could be resent.

        Options:
          --event ID        Every FAILED delivery of this event (its patient and key).
          --delivery ID     This one delivery.
          --dry-run         Print what would be resent and skipped; change nothing.
          --json            One JSON document: {"dryRun", "event", "resent": [ids], "skipped": [{id, reason}]}.
        Settings read: DATABASE_URL, EVENT_MAX_AGE (default 24h).
        """

    enum Target: Sendable {
        case event(Int64)
        case delivery(String)
    }

    let target: Target
    let dryRun: Bool

    init(arguments: inout CommandArguments) throws(UsageError) {
        let event = try arguments.value("--event")
        let delivery = try arguments.value("--delivery")
        switch (event, delivery) {
        case (let event?, nil):
            guard let id = Int64(event), id > 0 else { throw UsageError("--event needs an event id (a positive integer), got \"\(Printable.escaped(event))\"") }
            target = .event(id)
        case (nil, let delivery?):
            target = .delivery(delivery)
        case (nil, nil): throw UsageError("resend needs --event ID or --delivery ID")
        case (_?, _?): throw UsageError("resend takes --event ID or --delivery ID, not both")
        }
        dryRun = arguments.flag("--dry-run")
    }

    /// Event `id`, locked, with its age.
    static func eventQuery(id: Int64) -> PostgresQuery {
        """
        SELECT id, "eventKey" AS key, "patientId" AS patient, status, extract(epoch FROM now() - "createdAt")::double precision AS age_seconds
        FROM "PushOutbox" WHERE id = \(id)
        FOR UPDATE
        """
    }

    /// The newest event of a delivery's patient and key (several outbox rows may carry one key, of one patient or of
    /// several), locked, with its age. A delivery written before migration 7 names no patient: its caregiver's patients.
    static func eventQuery(delivery id: String) -> PostgresQuery {
        """
        SELECT o.id, o."eventKey" AS key, o."patientId" AS patient, o.status,
               extract(epoch FROM now() - o."createdAt")::double precision AS age_seconds
        FROM "PushDelivery" pd JOIN "PushOutbox" o ON o."eventKey" = pd."eventKey"
        WHERE pd.id = \(id) AND (o."patientId" = pd."patientId" OR pd."patientId" IS NULL AND EXISTS (
            SELECT 1 FROM "PushDevice" d JOIN "CaregiverPatientLink" l ON l."caregiverId" = d."ownerId"
            WHERE d.id = pd."pushDeviceId" AND l."patientId" = o."patientId"))
        ORDER BY o.id DESC LIMIT 1
        FOR UPDATE OF o
        """
    }

    /// Delivery `id`'s event key and status.
    static func deliveryQuery(id: String) -> PostgresQuery { #"SELECT "eventKey" AS key, status FROM "PushDelivery" WHERE id = \#(id)"# }

    /// The FAILED deliveries in scope (of `patient`'s event `key`; only delivery `only` when given), locked, each with
    /// why its device is no longer a recipient (`Recipients.refusal`, as the fan-out judges it; NULL: it still is).
    static func failedQuery(key: String, patient: String, only: String?) -> PostgresQuery {
        """
        SELECT pd.id, \(sql: Recipients.refusal(device: "d", patient: "\(patient)")) AS refusal
        FROM "PushDelivery" pd LEFT JOIN "PushDevice" d ON d.id = pd."pushDeviceId"
        WHERE pd."eventKey" = \(key) AND (pd."patientId" = \(patient) OR pd."patientId" IS NULL)
          AND pd.status = \(literal: DeliveryStatus.failed) AND (\(only)::text IS NULL OR pd.id = \(only)::text)
        ORDER BY pd."createdAt", pd.id
        FOR UPDATE OF pd
        """
    }

    /// The FAILED deliveries of `ids` back to PENDING, attempts from zero; returns those resent.
    static func resendDeliveriesQuery(ids: [String]) -> PostgresQuery {
        """
        UPDATE "PushDelivery"
        SET status = \(literal: DeliveryStatus.pending), attempts = 0, "leaseToken" = NULL, "leaseExpiresAt" = NULL,
            "lastError" = 'resend requested; before: ' || coalesce("lastError", '-')
        WHERE id = ANY(\(ids)::text[]) AND status = \(literal: DeliveryStatus.failed)
        RETURNING id
        """
    }

    /// The event is claimed again at once (a PENDING event keeps its lease and picks the deliveries up on its next claim).
    static func reopenEventQuery(id: Int64) -> PostgresQuery {
        """
        UPDATE "PushOutbox"
        SET status = \(literal: OutboxStatus.pending), attempts = 0, "availableAt" = now(), "processedAt" = NULL, "lastError" = NULL,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        WHERE id = \(id) AND status IN (\(literal: OutboxStatus.done), \(literal: OutboxStatus.dead))
        """
    }

    struct Skip: Sendable {
        var id: String
        var reason: String
    }

    struct Report: CommandReport {
        var dryRun: Bool
        var eventId: Int64
        var resent: [String]
        var skipped: [Skip]

        var text: String {
            var lines: [String] = []
            if resent.isEmpty && skipped.isEmpty {
                lines.append("event \(eventId) has no FAILED delivery in scope; nothing to resend")
            } else {
                lines.append("\(dryRun ? "would resend" : "resent") \(resent.count) delivery(ies) of event \(eventId)"
                    + (resent.isEmpty ? "" : ": " + CommandValues.idList(resent)))
            }
            for skip in skipped { lines.append("skipped \(Printable.escaped(skip.id)): \(Printable.escaped(skip.reason))") }
            if dryRun { lines.append("dry run: nothing changed") }
            return lines.joined(separator: "\n")
        }

        var json: JSONValue {
            .object([
                "dryRun": .bool(dryRun), "event": .number(Double(eventId)), "resent": .array(resent.map(JSONValue.string)),
                "skipped": .array(skipped.map { .object(["id": .string($0.id), "reason": .string($0.reason)]) }),
            ])
        }

        var exitStatus: Int32 { resent.isEmpty ? ExitStatus.failure : ExitStatus.ok }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        let (target, dryRun) = (self.target, self.dryRun)
        return try await context.withDatabase { client, settings in
            try await client.withTransaction { connection in
                let eventRows: PostgresRows
                var only: String?
                switch target {
                case .event(let id):
                    eventRows = try connection.query(Self.eventQuery(id: id))
                    guard !eventRows.isEmpty else { throw CommandFailure("no outbox event has id \(id)", details: ["event": .number(Double(id))]) }
                case .delivery(let id):
                    guard let delivery = try connection.query(Self.deliveryQuery(id: id)).first else {
                        throw CommandFailure("no delivery has id \(Printable.escaped(id))", details: ["delivery": .string(id)])
                    }
                    let status = try delivery["status"].decode(DeliveryStatus.self)
                    guard status == .failed else {
                        throw CommandFailure("delivery \(Printable.escaped(id)) is \(status.rawValue), not FAILED",
                                             details: ["delivery": .string(id), "status": .string(status.rawValue)])
                    }
                    eventRows = try connection.query(Self.eventQuery(delivery: id))
                    guard !eventRows.isEmpty else {
                        throw CommandFailure("the event of delivery \(Printable.escaped(id)) (key \(Printable.escaped(try delivery["key"].string()))) is gone (OUTBOX_RETENTION)",
                                             details: ["delivery": .string(id)])
                    }
                    only = id
                }
                let event = eventRows[0]
                let eventId = Int64(try event["id"].int())
                guard let key = event["key"].optionalString() else {
                    throw CommandFailure("event \(eventId) was never claimed: it has no deliveries yet", details: ["event": .number(Double(eventId))])
                }
                let failed = try connection.query(Self.failedQuery(key: key, patient: try event["patient"].string(), only: only))
                var eligible: [String] = []
                var skipped: [Skip] = []
                let age = try event["age_seconds"].double()
                for row in failed {
                    let id = try row["id"].string()
                    switch EventFate.resend(eventAgeSeconds: age, maxAge: settings.eventMaxAge, refusal: try Recipients.refusal(row["refusal"])) {
                    case .resend: eligible.append(id)
                    case .skip(let reason): skipped.append(Skip(id: id, reason: reason))
                    }
                }
                var resent = eligible
                if !dryRun && !eligible.isEmpty {
                    resent = try connection.query(Self.resendDeliveriesQuery(ids: eligible)).map { try $0["id"].string() }.sorted()
                    try connection.query(Self.reopenEventQuery(id: eventId))
                    try connection.query(RedriveCommand.wakeQuery)
                }
                return Report(dryRun: dryRun, eventId: eventId, resent: resent, skipped: skipped)
            }
        }
    }
}
