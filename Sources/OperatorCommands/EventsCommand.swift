import FoundationEssentials
import JSON
import Outbox
import Postgres
import TextSupport

/// `events --status DEAD|PENDING|EXPIRED [--since DURATION] [--limit N]`: the newest events in one state.
struct EventsCommand: OperatorCommand {
    static let name = "events"
    static let summary = "List the newest DEAD, PENDING or EXPIRED events with their last error."
    static let help = """
        Usage: medication-worker events --status DEAD|PENDING|EXPIRED [--since DURATION] [--limit N] [--json]

        Lists the newest events in that state (newest first) with attempts and "lastError".

        Options:
          --status S        DEAD, PENDING or EXPIRED (required).
          --since DURATION  Only events created within DURATION (30m, 6h, 2d).
          --limit N         At most N events (default 50).
          --json            One JSON document: {"status": S, "events": [...], "limit": N}.
        Next: `event ID` for one of them, `redrive --dry-run` for DEAD ones.
        """

    static let defaultLimit = 50

    let status: OutboxStatus
    let since: Duration?
    let limit: Int

    init(arguments: inout CommandArguments) throws(UsageError) {
        guard let text = try arguments.value("--status") else { throw UsageError("events needs --status DEAD, PENDING or EXPIRED") }
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
        let (status, since, limit) = (self.status, self.since, self.limit)
        return try await context.withDatabase { client, _ in
            let rows = try await client.query(Self.eventsQuery(status: status, since: since, limit: limit))
            return Report(status: status, since: since, limit: limit, events: try rows.map { try EventCommand.Event($0) })
        }
    }
}
