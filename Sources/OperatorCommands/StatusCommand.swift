import FoundationEssentials
import JSON
import Outbox
import Postgres

/// `status`: the backlog, dead and expired events, recent deliveries and disables, table sizes, and the live instances.
struct StatusCommand: OperatorCommand {
    static let name = "status"
    static let summary = "Show the backlog, dead and expired events, recent deliveries, disables and the live instances."
    static let help = """
        Usage: medication-worker status [--json]

        Counts the outbox by status (due now, oldest pending), deliveries of the last hour (the SENT ones
        the API's inline sender wrote during the cutover shown apart: never pending, never sent again),
        device disables of the last hour, table sizes, and lists the live `run` instances (host, pid,
        version, started, last heartbeat).
        Cheap on any outbox: PENDING, DEAD and EXPIRED are counted through their partial indexes; DONE is
        counted while the table's statistics put it under 100,000 rows, and past that estimated from them
        (shown as ~N). Next: `events --status DEAD` for what died, `event ID` for one event.

        Options:
          --json    One JSON document with the same facts.
        """

    init(arguments: inout CommandArguments) throws(UsageError) {}

    struct Report: CommandReport {
        var events: [OutboxStatus: Int]
        /// True when the DONE count is the statistics' estimate (a large outbox), not a count.
        var doneEstimated = false
        var duePending: Int
        var oldestPendingSeconds: Double?
        var recentDeliveries: [DeliveryStatus: Int]
        /// Of the SENT ones, rows the API's inline sender wrote (docs/operations.md, "The cutover from the API's inline
        /// sender"): 0 once every API instance enqueues.
        var recentInline: Int
        var recentDisabled: Int
        var outboxBytes: Int
        var deliveryBytes: Int
        var oldestFinishedSeconds: Double?
        var instances: [LiveInstances.Instance]

        var text: String {
            func size(_ bytes: Int) -> String {
                bytes >= 1 << 20 ? CommandValues.oneDecimal(Double(bytes) / 1_048_576) + " MiB" : "\(bytes / 1024) KiB"
            }
            var lines = [
                "outbox events:   pending \(events[.pending] ?? 0) (due now \(duePending)), "
                    + (doneEstimated ? "done ~\(events[.done] ?? 0) (estimated), " : "done \(events[.done] ?? 0), ")
                    + "dead \(events[.dead] ?? 0), expired \(events[.expired] ?? 0)",
                "oldest pending:  \(CommandValues.age(oldestPendingSeconds))",
                "deliveries (1h): sent \(recentDeliveries[.sent] ?? 0) (by the API's inline sender \(recentInline)), failed \(recentDeliveries[.failed] ?? 0), "
                    + "pending \(recentDeliveries[.pending] ?? 0); devices disabled (1h): \(recentDisabled)",
                #"table sizes:     "PushOutbox" \#(size(outboxBytes)), "PushDelivery" \#(size(deliveryBytes))"#,
                "oldest finished: \(CommandValues.age(oldestFinishedSeconds)) (pruned after OUTBOX_RETENTION)",
                "instances:       \(instances.count) live",
            ]
            if !instances.isEmpty {
                let rows = instances.map { instance in
                    [instance.host, String(instance.pid), instance.version, CommandValues.timestamp(instance.startedAt),
                     CommandValues.timestamp(instance.heartbeatAt)]
                }
                lines.append(CommandValues.table(["HOST", "PID", "VERSION", "STARTED", "LAST HEARTBEAT"], rows)
                    .split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))
            }
            return lines.joined(separator: "\n")
        }

        var json: JSONValue {
            func counts<K: RawRepresentable & CaseIterable>(_ values: [K: Int]) -> JSONValue where K.RawValue == String {
                .object(Dictionary(uniqueKeysWithValues: K.allCases.map { ($0.rawValue, JSONValue.number(Double(values[$0] ?? 0))) }))
            }
            return .object([
                "events": counts(events),
                "doneEstimated": .bool(doneEstimated),
                "duePending": .number(Double(duePending)),
                "oldestPendingSeconds": oldestPendingSeconds.map(JSONValue.number) ?? .null,
                "deliveriesLastHour": counts(recentDeliveries),
                "inlineSentLastHour": .number(Double(recentInline)),
                "devicesDisabledLastHour": .number(Double(recentDisabled)),
                "tableBytes": .object(["PushOutbox": .number(Double(outboxBytes)), "PushDelivery": .number(Double(deliveryBytes))]),
                "oldestFinishedSeconds": oldestFinishedSeconds.map(JSONValue.number) ?? .null,
                "instances": .array(instances.map { instance in
                    .object(["id": .string(instance.id), "host": .string(instance.host), "pid": .number(Double(instance.pid)),
                             "version": .string(instance.version), "startedAt": CommandValues.timestamp(instance.startedAt),
                             "heartbeatAt": CommandValues.timestamp(instance.heartbeatAt)])
                }),
            ])
        }
    }

    /// Past this many finished rows (by the statistics) DONE is estimated, not counted.
    static let doneCountLimit = 100_000

    /// Events per status. PENDING, DEAD and EXPIRED through their partial indexes; DONE, the bulk of a large table,
    /// counted only while the finished-rows index's statistics (`finished`, as the queue gauges read them) put it under
    /// `doneCountLimit` (`done` is NULL past it: the subquery is never run).
    static let eventCountsQuery: PostgresQuery = """
        WITH estimate AS (
            SELECT coalesce((SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass('"PushOutbox_finished_idx"')), 0) AS finished
        )
        SELECT (SELECT count(*) FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.pending)) AS pending,
               (SELECT count(*) FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.dead)) AS dead,
               (SELECT count(*) FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.expired)) AS expired,
               estimate.finished,
               CASE WHEN estimate.finished < \(doneCountLimit) THEN (SELECT count(*) FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.done)) END AS done
        FROM estimate
        """

    /// The oldest PENDING event's age in seconds (`oldest`) and how many are due (`due`).
    static let pendingQuery: PostgresQuery = """
        SELECT extract(epoch FROM now() - min("createdAt"))::double precision AS oldest,
               count(*) FILTER (WHERE "availableAt" <= now()) AS due
        FROM "PushOutbox" WHERE status = \(literal: OutboxStatus.pending)
        """

    /// Deliveries of the last hour by status, the SENT ones the API's inline sender wrote (it leaves "sentAt" empty; the
    /// worker always writes it), and devices disabled in it.
    static let recentQuery: PostgresQuery = """
        SELECT (SELECT count(*) FROM "PushDelivery" WHERE "createdAt" > now() - interval '1 hour' AND status = \(literal: DeliveryStatus.pending)) AS pending,
               (SELECT count(*) FROM "PushDelivery" WHERE "createdAt" > now() - interval '1 hour' AND status = \(literal: DeliveryStatus.sent)) AS sent,
               (SELECT count(*) FROM "PushDelivery" WHERE "createdAt" > now() - interval '1 hour' AND status = \(literal: DeliveryStatus.sent) AND "sentAt" IS NULL) AS inline,
               (SELECT count(*) FROM "PushDelivery" WHERE "createdAt" > now() - interval '1 hour' AND status = \(literal: DeliveryStatus.failed)) AS failed,
               (SELECT count(*) FROM "PushDeviceDisabled" WHERE "disabledAt" > now() - interval '1 hour') AS disabled
        """

    /// The two tables' sizes in bytes and the oldest finished event's age in seconds.
    static let sizesQuery: PostgresQuery = """
        SELECT pg_total_relation_size('"PushOutbox"') AS outbox, pg_total_relation_size('"PushDelivery"') AS delivery,
               (SELECT extract(epoch FROM now() - min("processedAt"))::double precision FROM "PushOutbox"
                WHERE status IN (\(literal: OutboxStatus.done), \(literal: OutboxStatus.expired))) AS oldest_finished
        """

    func run(_ context: CommandContext) async throws -> any CommandReport {
        try await context.withDatabase { client, _ in
            try await client.withConnection { connection in
                var events: [OutboxStatus: Int] = [:]
                let counts = try connection.query(Self.eventCountsQuery)[0]
                events[.pending] = try counts["pending"].int()
                events[.dead] = try counts["dead"].int()
                events[.expired] = try counts["expired"].int()
                let doneEstimated = counts["done"].isNull
                events[.done] = doneEstimated ? max(0, try counts["finished"].int() - (events[.expired] ?? 0)) : try counts["done"].int()
                let pending = try connection.query(Self.pendingQuery)[0]
                let recent = try connection.query(Self.recentQuery)[0]
                let sizes = try connection.query(Self.sizesQuery)[0]
                return Report(
                    events: events, doneEstimated: doneEstimated, duePending: try pending["due"].int(),
                    oldestPendingSeconds: pending["oldest"].isNull ? nil : try pending["oldest"].double(),
                    recentDeliveries: [.pending: try recent["pending"].int(), .sent: try recent["sent"].int(), .failed: try recent["failed"].int()],
                    recentInline: try recent["inline"].int(), recentDisabled: try recent["disabled"].int(),
                    outboxBytes: try sizes["outbox"].int(), deliveryBytes: try sizes["delivery"].int(),
                    oldestFinishedSeconds: sizes["oldest_finished"].isNull ? nil : try sizes["oldest_finished"].double(),
                    instances: try LiveInstances.list(connection))
            }
        }
    }
}
