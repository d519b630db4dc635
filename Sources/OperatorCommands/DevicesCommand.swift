import FoundationEssentials
import JSON
import Postgres
import TextSupport
import Timekeeping

/// `devices disabled [--since DURATION] [--reason CODE]` and `devices enable --since DURATION [--reason CODE] [--dry-run]`:
/// the devices the worker disabled, from `"PushDeviceDisabled"`, and the undo of a wrong disable; `devices --owner ID`:
/// one caregiver's registrations (`DevicesCommand+Owner.swift`).
struct DevicesCommand: OperatorCommand {
    static let name = "devices"
    static let summary = "List a caregiver's registrations (`devices --owner ID`), the devices the worker disabled (`devices disabled`), or re-enable them (`devices enable`)."
    static let help = """
        Usage: medication-worker devices --owner ID [--json]
               medication-worker devices disabled [--since DURATION] [--reason CODE] [--limit N] [--json]
               medication-worker devices enable --since DURATION [--reason CODE] [--dry-run] [--json]

        devices --owner   Every registration ("PushDevice" row) of caregiver ID: the token's first and last 6
                          characters, enabled or not, "lastSeenAt", its last SENT push, its last disable by the
                          worker (when, the FCM error code and answer, witnessed or not, restored or not), and
                          whether another registration of the same phone now speaks for its token (then it gets
                          no push). Exit status 1 when no caregiver has that id.

        devices disabled  Lists the devices the worker disabled, newest first, from the "PushDeviceDisabled"
                          ledger: when, the FCM error code (UNREGISTERED, SENDER_ID_MISMATCH, INVALID_ARGUMENT),
                          the event whose send showed it, whether the device is still disabled, and when an
                          operator restored it. Tokens are never shown.
        devices enable    Re-enables exactly the devices the worker disabled within DURATION (not restored
                          since) that nobody changed after the disable ("updatedAt"): a device the app
                          re-registered, or the API changed, is left alone and reported as skipped.
                          Records "restoredAt" in the ledger. Pending events then reach them on their next
                          claim; `resend --event ID` sends a FAILED delivery again.

        Options:
          --since DURATION  Disables within DURATION (30m, 6h, 2d); required by `enable`.
          --reason CODE     Only disables for this FCM error code (e.g. SENDER_ID_MISMATCH).
          --limit N         `disabled`: at most N rows (default 100).
          --dry-run         `enable`: print what would be re-enabled and skipped; change nothing.
          --json            One JSON document with the same facts.
        """

    enum Action: Sendable {
        case list(limit: Int)
        case enable(dryRun: Bool)
        case owner(String)
    }

    let action: Action
    let since: Duration?
    let reason: String?

    init(arguments: inout CommandArguments) throws(UsageError) {
        if let owner = try arguments.value("--owner") {
            guard arguments.positional() == nil else { throw UsageError("devices --owner ID takes no `disabled` or `enable`") }
            (action, since, reason) = (.owner(owner), nil, nil)
            return
        }
        guard let verb = arguments.positional() else { throw UsageError("devices needs --owner ID, `disabled` or `enable`") }
        since = try arguments.duration("--since")
        reason = try arguments.value("--reason").map { $0.uppercased() }
        switch verb {
        case "disabled":
            action = .list(limit: try arguments.positiveInteger("--limit", max: 100_000) ?? 100)
        case "enable":
            guard since != nil else { throw UsageError("devices enable needs --since DURATION (the window of the disables to undo)") }
            action = .enable(dryRun: arguments.flag("--dry-run"))
        default:
            throw UsageError("devices takes `disabled` or `enable`, got \"\(Printable.escaped(verb))\"")
        }
    }

    /// A ledger row with the device as it is now.
    struct Disable: Sendable {
        var ledgerId: String
        var deviceId: String
        var reason: String
        var eventKey: String?
        var lastError: String?
        var disabledAt: Date
        var restoredAt: Date?
        /// nil: the device row is gone.
        var enabledNow: Bool?
        var changedSince: Bool

        /// The select list `init(_:)` reads (ledger `l`, device `d`).
        static let columns: PostgresQuery = """
            l.id AS ledger_id, l."pushDeviceId" AS device_id, l.reason, l."eventKey" AS event_key, l."lastError" AS last_error,
            l."disabledAt" AS disabled_at, l."restoredAt" AS restored_at, d."isEnabled" AS enabled_now,
            coalesce(d."updatedAt" > l."disabledAt", false) AS changed_since
            """

        init(_ row: PostgresRow) throws {
            ledgerId = try row["ledger_id"].string()
            deviceId = try row["device_id"].string()
            reason = try row["reason"].string()
            eventKey = row["event_key"].optionalString()
            lastError = row["last_error"].optionalString()
            disabledAt = try row["disabled_at"].date()
            restoredAt = try row["restored_at"].optionalDate()
            enabledNow = row["enabled_now"].isNull ? nil : try row["enabled_now"].bool()
            changedSince = try row["changed_since"].bool()
        }

        var json: JSONValue {
            .object([
                "ledgerId": .string(ledgerId), "pushDeviceId": .string(deviceId), "reason": .string(reason),
                "eventKey": CommandValues.text(eventKey), "lastError": CommandValues.text(lastError),
                "disabledAt": CommandValues.timestamp(disabledAt), "restoredAt": CommandValues.timestamp(restoredAt),
                "enabledNow": enabledNow.map(JSONValue.bool) ?? .null, "changedSince": .bool(changedSince),
            ])
        }
    }

    /// The newest disables, at most `limit`, within `since` and of `reason` when given.
    static func listQuery(since: Duration?, reason: String?, limit: Int) -> PostgresQuery {
        let seconds = since?.asSeconds
        return """
        SELECT \(sql: Disable.columns)
        FROM "PushDeviceDisabled" l LEFT JOIN "PushDevice" d ON d.id = l."pushDeviceId"
        WHERE (\(seconds)::double precision IS NULL OR l."disabledAt" > now() - make_interval(secs => \(seconds)::double precision))
          AND (\(reason)::text IS NULL OR l.reason = \(reason)::text)
        ORDER BY l."disabledAt" DESC, l.id
        LIMIT \(limit)
        """
    }

    /// The latest unrestored disable of each device in the window (the enable statement re-checks each row it changes).
    static func candidatesQuery(window: Duration, reason: String?) -> PostgresQuery {
        """
        SELECT DISTINCT ON (l."pushDeviceId") \(sql: Disable.columns)
        FROM "PushDeviceDisabled" l LEFT JOIN "PushDevice" d ON d.id = l."pushDeviceId"
        WHERE l."disabledAt" > now() - make_interval(secs => \(window.asSeconds)::double precision) AND l."restoredAt" IS NULL
          AND (\(reason)::text IS NULL OR l.reason = \(reason)::text)
        ORDER BY l."pushDeviceId", l."disabledAt" DESC
        """
    }

    /// Re-enables a device only while it is still as the worker left it: disabled, and not updated after the disable.
    /// `ledgerIds[i]` is the disable of device `deviceIds[i]` to undo.
    static func enableQuery(ledgerIds: [String], deviceIds: [String]) -> PostgresQuery {
        """
        WITH v AS (SELECT * FROM unnest(\(ledgerIds)::text[], \(deviceIds)::text[]) AS v(ledger_id, device_id)),
        enabled AS (
            UPDATE "PushDevice" d SET "isEnabled" = true, "updatedAt" = now()
            FROM v JOIN "PushDeviceDisabled" l ON l.id = v.ledger_id
            WHERE d.id = v.device_id AND NOT d."isEnabled" AND d."updatedAt" <= l."disabledAt"
            RETURNING d.id
        )
        UPDATE "PushDeviceDisabled" l SET "restoredAt" = now()
        FROM v JOIN enabled e ON e.id = v.device_id
        WHERE l.id = v.ledger_id
        RETURNING l."pushDeviceId" AS device_id
        """
    }

    struct ListReport: CommandReport {
        var since: Duration?
        var reason: String?
        var limit: Int
        var disables: [Disable]

        var text: String {
            let scope = (since.map { " within \(CommandValues.age($0.asSeconds))" } ?? "") + (reason.map { " for \(Printable.escaped($0))" } ?? "")
            guard !disables.isEmpty else { return "no devices disabled by the worker\(scope)" }
            let rows = disables.map { disable in
                let now = disable.enabledNow.map { $0 ? "enabled" : "disabled" } ?? "deleted"
                return [CommandValues.timestamp(disable.disabledAt), disable.deviceId, disable.reason, disable.eventKey ?? "-", now,
                        disable.restoredAt.map(CommandValues.timestamp) ?? "-"]
            }
            let more = disables.count == limit ? " (the newest \(limit); --limit for more)" : ""
            return "\(disables.count) disable(s)\(scope)\(more)\n"
                + CommandValues.table(["DISABLED AT", "DEVICE", "REASON", "EVENT KEY", "NOW", "RESTORED AT"], rows)
        }

        var json: JSONValue {
            .object(["sinceSeconds": since.map { .number($0.asSeconds) } ?? .null, "reason": CommandValues.text(reason),
                     "limit": .number(Double(limit)), "disabled": .array(disables.map(\.json))])
        }
    }

    struct EnableReport: CommandReport {
        var dryRun: Bool
        var since: Duration
        var reason: String?
        var enabled: [String]
        var skipped: [(deviceId: String, reason: String)]

        var text: String {
            let scope = "within \(CommandValues.age(since.asSeconds))" + (reason.map { " for \(Printable.escaped($0))" } ?? "")
            var lines = ["\(dryRun ? "would re-enable" : "re-enabled") \(enabled.count) device(s) disabled \(scope)"
                + (enabled.isEmpty ? "" : ": " + CommandValues.idList(enabled))]
            if !skipped.isEmpty {
                lines.append("skipped \(skipped.count):")
                for skip in skipped { lines.append("  \(Printable.escaped(skip.deviceId)): \(Printable.escaped(skip.reason))") }
            }
            if dryRun { lines.append("dry run: nothing changed") }
            return lines.joined(separator: "\n")
        }

        var json: JSONValue {
            .object([
                "dryRun": .bool(dryRun), "sinceSeconds": .number(since.asSeconds), "reason": CommandValues.text(reason),
                "enabled": .array(enabled.map(JSONValue.string)),
                "skipped": .array(skipped.map { .object(["pushDeviceId": .string($0.deviceId), "reason": .string($0.reason)]) }),
            ])
        }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        let (action, since, reason) = (self.action, self.since, self.reason)
        return try await context.withDatabase { client, _ in
            switch action {
            case .owner(let owner):
                return try await client.withConnection { try Self.ownerReport(owner, $0) } as any CommandReport
            case .list(let limit):
                let rows = try await client.query(Self.listQuery(since: since, reason: reason, limit: limit))
                return ListReport(since: since, reason: reason, limit: limit, disables: try rows.map { try Disable($0) }) as any CommandReport
            case .enable(let dryRun):
                let window = since!
                return try await client.withTransaction { connection -> any CommandReport in
                    let candidates = try connection.query(Self.candidatesQuery(window: window, reason: reason))
                        .map { try Disable($0) }
                    var eligible: [Disable] = []
                    var skipped: [(deviceId: String, reason: String)] = []
                    for candidate in candidates {
                        switch (candidate.enabledNow, candidate.changedSince) {
                        case (nil, _): skipped.append((candidate.deviceId, "device deleted"))
                        case (true?, _): skipped.append((candidate.deviceId, "already enabled (the app re-registered it or someone enabled it)"))
                        case (false?, true): skipped.append((candidate.deviceId, "changed since the disable (\"updatedAt\"): left alone"))
                        case (false?, false): eligible.append(candidate)
                        }
                    }
                    var enabled = eligible.map(\.deviceId)
                    if !dryRun && !eligible.isEmpty {
                        enabled = try connection.query(Self.enableQuery(ledgerIds: eligible.map(\.ledgerId), deviceIds: eligible.map(\.deviceId)))
                            .map { try $0["device_id"].string() }
                        let done = Set(enabled)
                        for lost in eligible where !done.contains(lost.deviceId) {
                            skipped.append((lost.deviceId, "changed while enabling: left alone"))
                        }
                    }
                    return EnableReport(dryRun: dryRun, since: window, reason: reason, enabled: enabled.sorted(), skipped: skipped)
                }
            }
        }
    }
}
