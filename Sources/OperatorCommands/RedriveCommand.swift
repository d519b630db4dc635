import FoundationEssentials
import JSON
import Outbox
import Postgres
import TextSupport
import Timekeeping

/// `redrive (--all | --event ID | --since DURATION) [--dry-run]`: DEAD events back to PENDING, except those past
/// EVENT_MAX_AGE, which would only expire: they stay DEAD and the report counts them. Without a scope it only previews.
struct RedriveCommand: OperatorCommand {
    static let name = "redrive"
    static let summary = "Make DEAD events PENDING again (not those past EVENT_MAX_AGE); --dry-run to preview."
    static let help = """
        Usage: medication-worker redrive (--all | --event ID | --since DURATION) [--dry-run] [--json]

        Makes DEAD events PENDING again, due at once with their attempts reset, and wakes the workers.
        An event created longer ago than EVENT_MAX_AGE would only turn EXPIRED when claimed, so it stays
        DEAD and is reported as skipped. Prints every event it redrove and every one it skipped.
        One of --all, --event or --since is required (exit status 64 without), except with --dry-run.

        Options:
          --all             Every DEAD event younger than EVENT_MAX_AGE.
          --event ID        Only this event (exit status 1 when it is not DEAD or is past EVENT_MAX_AGE).
          --since DURATION  Only events that went DEAD within DURATION (30m, 6h, 2d): after an outage.
          --dry-run         Print what would be redriven and skipped (every DEAD event without a scope); change nothing.
          --json            One JSON document: {"dryRun", "redriven": [ids], "skippedPastMaxAge": [ids], ...}.
        Settings read: DATABASE_URL, EVENT_MAX_AGE (default 24h).
        """

    let eventId: Int64?
    let since: Duration?
    let dryRun: Bool

    init(arguments: inout CommandArguments) throws(UsageError) {
        if let text = try arguments.value("--event") {
            guard let id = Int64(text), id > 0 else { throw UsageError("--event needs an event id (a positive integer), got \"\(Printable.escaped(text))\"") }
            eventId = id
        } else {
            eventId = nil
        }
        since = try arguments.duration("--since")
        let all = arguments.flag("--all")
        dryRun = arguments.flag("--dry-run")
        // A bare redrive would re-queue every DEAD event at once: the scope is said out loud, as `devices enable --since` is.
        if all && (eventId != nil || since != nil) { throw UsageError("redrive takes --all, or --event and --since, not both") }
        if !all && eventId == nil && since == nil && !dryRun {
            throw UsageError("redrive needs --all, --event ID or --since DURATION (it would re-queue every DEAD event); "
                + "`redrive --dry-run` previews them")
        }
    }

    /// The DEAD events in scope, locked, each with its age (`EventFate.redrive` judges it against EVENT_MAX_AGE).
    /// (Event `eventId` when given, processed within `since` when given.)
    static func candidatesQuery(eventId: Int64?, since: Duration?) -> PostgresQuery {
        let seconds = since?.asSeconds
        return """
        SELECT id, extract(epoch FROM now() - "createdAt")::double precision AS age_seconds
        FROM "PushOutbox"
        WHERE status = \(literal: OutboxStatus.dead) AND (\(eventId)::bigint IS NULL OR id = \(eventId)::bigint)
          AND (\(seconds)::double precision IS NULL OR "processedAt" > now() - make_interval(secs => \(seconds)::double precision))
        ORDER BY id
        FOR UPDATE
        """
    }

    /// The DEAD events of `ids` due again at once, attempts from zero; returns those redriven.
    static func redriveQuery(ids: [Int64]) -> PostgresQuery {
        """
        UPDATE "PushOutbox"
        SET status = \(literal: OutboxStatus.pending), attempts = 0, "availableAt" = now(), "processedAt" = NULL,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        WHERE id = ANY(\(ids)::bigint[]) AND status = \(literal: OutboxStatus.dead)
        RETURNING id
        """
    }

    /// Event `id`'s status.
    static func statusQuery(id: Int64) -> PostgresQuery { #"SELECT status FROM "PushOutbox" WHERE id = \#(id)"# }

    /// Wakes the workers' claimers (they LISTEN on `push_outbox`).
    static let wakeQuery: PostgresQuery = "SELECT pg_notify('push_outbox', '')"

    struct Report: CommandReport {
        var dryRun: Bool
        var eventId: Int64?
        var since: Duration?
        var eventMaxAge: Duration
        var redriven: [Int64]
        var skippedPastMaxAge: [Int64]

        var text: String {
            let verb = dryRun ? "would redrive" : "redriven"
            var lines: [String] = []
            if redriven.isEmpty && skippedPastMaxAge.isEmpty {
                lines.append(since.map { "no DEAD events that died within \(CommandValues.age($0.asSeconds))" } ?? "no DEAD events")
            } else {
                lines.append("\(verb) \(redriven.count) event(s)\(redriven.isEmpty ? "" : ": " + CommandValues.idList(redriven))")
            }
            if !skippedPastMaxAge.isEmpty {
                lines.append("skipped \(skippedPastMaxAge.count) past EVENT_MAX_AGE (\(CommandValues.age(eventMaxAge.asSeconds))): "
                    + CommandValues.idList(skippedPastMaxAge) + " (left DEAD: they would only expire)")
            }
            if dryRun { lines.append("dry run: nothing changed") }
            return lines.joined(separator: "\n")
        }

        var json: JSONValue {
            .object([
                "dryRun": .bool(dryRun), "event": eventId.map { .number(Double($0)) } ?? .null,
                "sinceSeconds": since.map { .number($0.asSeconds) } ?? .null, "eventMaxAgeSeconds": .number(eventMaxAge.asSeconds),
                "redriven": .array(redriven.map { .number(Double($0)) }),
                "skippedPastMaxAge": .array(skippedPastMaxAge.map { .number(Double($0)) }),
            ])
        }

        /// One named event that could not be redriven is a failure: the operator asked for it.
        var exitStatus: Int32 { eventId != nil && redriven.isEmpty ? ExitStatus.failure : ExitStatus.ok }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        let (eventId, since, dryRun) = (self.eventId, self.since, self.dryRun)
        return try await context.withDatabase { client, settings in
            try await client.withTransaction { connection in
                let candidates = try connection.query(Self.candidatesQuery(eventId: eventId, since: since)).map { row in
                    (id: Int64(try row["id"].int()),
                     tooOld: EventFate.redrive(ageSeconds: try row["age_seconds"].double(), maxAge: settings.eventMaxAge) == .skipPastMaxAge)
                }
                if let eventId, candidates.isEmpty {
                    let found = try connection.query(Self.statusQuery(id: eventId))
                    guard let row = found.first else {
                        throw CommandFailure("no outbox event has id \(eventId)", details: ["event": .number(Double(eventId))])
                    }
                    let status = try row["status"].string()
                    throw CommandFailure("outbox event \(eventId) is \(status), not DEAD\(since == nil ? "" : " within --since")",
                                         details: ["event": .number(Double(eventId)), "status": .string(status)])
                }
                let eligible = candidates.filter { !$0.tooOld }.map(\.id)
                var redriven = eligible
                if !dryRun && !eligible.isEmpty {
                    redriven = try connection.query(Self.redriveQuery(ids: eligible)).map { Int64(try $0["id"].int()) }.sorted()
                    try connection.query(Self.wakeQuery)
                }
                return Report(dryRun: dryRun, eventId: eventId, since: since, eventMaxAge: settings.eventMaxAge, redriven: redriven,
                              skippedPastMaxAge: candidates.filter(\.tooOld).map(\.id))
            }
        }
    }
}
