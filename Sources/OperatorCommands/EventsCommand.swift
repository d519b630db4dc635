import FoundationEssentials
import JSON
import Outbox
import Postgres
import TextSupport

/// `events --status DEAD|PENDING|EXPIRED [--since DURATION] [--limit N]`: the newest events in one state; and
/// `events --patient ID | --caregiver ID [--since DURATION] [--limit N]`: one person's events with each device's fate
/// (`EventsCommand+Person.swift`).
struct EventsCommand: OperatorCommand {
    static let name = "events"
    static let summary = "List the newest DEAD, PENDING or EXPIRED events, or one patient's or caregiver's events with each device's fate."
    static let help = """
        Usage: medication-worker events --status DEAD|PENDING|EXPIRED [--since DURATION] [--limit N] [--json]
               medication-worker events --patient ID | --caregiver ID [--since DURATION] [--limit N] [--json]

        --status     Lists the newest events in that state (newest first) with attempts and "lastError".
        --patient    "Why didn't my caregiver get the push?": the patient's events (newest first, each named by its outbox id),
        --caregiver  with what became of it on every device of that caregiver, or of the patient's caregivers: SENT at …,
                     FAILED and why, PENDING, skipped and why (superseded by another registration: whose, when; the
                     link not ACTIVE; pushes switched off), or "no delivery: the device was disabled at …". Tokens masked
                     (first and last 6 characters). Exit status 1 when no such patient or caregiver exists.

        Options:
          --status S        DEAD, PENDING or EXPIRED.
          --patient ID      A patient's id ("Patient".id).
          --caregiver ID    A caregiver's id (the links' "caregiverId", the devices' "ownerId").
          --since DURATION  Only events created within DURATION (30m, 6h, 2d; default 24h with --patient/--caregiver).
          --limit N         At most N events (default 50).
          --json            One JSON document: {"status": S, "events": [...], "limit": N}, or with --patient/--caregiver
                            {"patientId"|"caregiverId": ID, "events": [{"event": {...}, "devices": [{..., "fate": ...}]}]}.
        Next: `event ID` for one of them, `redrive --dry-run` for DEAD ones, `devices --owner ID` for a caregiver's phones.
        """

    static let defaultLimit = 50
    /// `--since` of `--patient` / `--caregiver` when not given: "roughly when" is usually today.
    static let defaultPersonWindow: Duration = .seconds(86_400)

    /// Whose events: one patient's, or those of every patient a caregiver is linked to.
    enum Person: Sendable {
        case patient(String)
        case caregiver(String)
    }

    let status: OutboxStatus
    let since: Duration?
    let limit: Int
    /// Set: the per-person listing (`status` unused).
    let person: Person?

    init(arguments: inout CommandArguments) throws(UsageError) {
        let patient = try arguments.value("--patient"), caregiver = try arguments.value("--caregiver")
        if patient != nil || caregiver != nil {
            guard patient == nil || caregiver == nil else { throw UsageError("events takes --patient or --caregiver, not both") }
            guard try arguments.value("--status") == nil else {
                throw UsageError("--status lists events in one state; with --patient or --caregiver every state is listed")
            }
            person = patient.map(Person.patient) ?? caregiver.map(Person.caregiver)
            status = .pending
            since = try arguments.duration("--since") ?? Self.defaultPersonWindow
            limit = try arguments.positiveInteger("--limit", max: 10_000) ?? Self.defaultLimit
            return
        }
        person = nil
        guard let text = try arguments.value("--status") else {
            throw UsageError("events needs --status DEAD, PENDING or EXPIRED, or --patient ID or --caregiver ID")
        }
        guard let status = OutboxStatus(rawValue: text.uppercased()), status != .done else {
            throw UsageError("--status must be DEAD, PENDING or EXPIRED, got \"\(Printable.escaped(text))\"")
        }
        self.status = status
        since = try arguments.duration("--since")
        limit = try arguments.positiveInteger("--limit", max: 10_000) ?? Self.defaultLimit
    }

    /// The newest events of `status`, at most `limit`, created within `since` when given.
    static func eventsQuery(status: OutboxStatus, since: Duration?, limit: Int) -> PostgresQuery {
        let seconds = since?.asSeconds
        return """
        SELECT \(sql: EventCommand.Event.columns)
        FROM "PushOutbox" o
        WHERE o.status = \(status.rawValue)
          AND (\(seconds)::double precision IS NULL OR o."createdAt" > now() - make_interval(secs => \(seconds)::double precision))
        ORDER BY o.id DESC
        LIMIT \(limit)
        """
    }

    struct Report: CommandReport {
        var status: OutboxStatus
        var since: Duration?
        var limit: Int
        var events: [EventCommand.Event]

        var text: String {
            let window = since.map { " created within \(CommandValues.age($0.asSeconds))" } ?? ""
            guard !events.isEmpty else { return "no \(status.rawValue) events\(window)" }
            let rows = events.map { event in
                [String(event.id), CommandValues.timestamp(event.createdAt), String(event.attempts), event.eventKey ?? "-",
                 event.lastError ?? "-"]
            }
            let more = events.count == limit ? " (the newest \(limit); --limit for more)" : ""
            return "\(events.count) \(status.rawValue) event(s)\(window)\(more)\n"
                + CommandValues.table(["ID", "CREATED", "ATTEMPTS", "EVENT KEY", "LAST ERROR"], rows)
        }

        var json: JSONValue {
            .object(["status": .string(status.rawValue), "limit": .number(Double(limit)),
                     "sinceSeconds": since.map { .number($0.asSeconds) } ?? .null,
                     "events": .array(events.map(\.json))])
        }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        if let person { return try await runForPerson(person, context) }
        let (status, since, limit) = (self.status, self.since, self.limit)
        return try await context.withDatabase { client, _ in
            let rows = try await client.query(Self.eventsQuery(status: status, since: since, limit: limit))
            return Report(status: status, since: since, limit: limit, events: try rows.map { try EventCommand.Event($0) })
        }
    }
}
