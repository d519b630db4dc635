import FoundationEssentials
import Postgres
import Push
import Timekeeping

extension OutboxStore {
    /// `'PENDING'` for the guard of a statement that finds events by id: a sub-select, so that the planner cannot match
    /// it to the predicate of `"PushOutbox_pending_due_idx"` (`WHERE status = 'PENDING'`). Written as a constant, the
    /// planner trusted statistics taken while the queue was empty (the partial index "holds one row") and hash-joined
    /// the flush's events against the whole pending queue (docs/benchmark.md has the measurement). By id, it is one
    /// primary-key probe per event whatever the queue holds.
    static let stillPending: PostgresQuery = "(SELECT \(literal: OutboxStatus.pending)::text)"

    /// Disables without a witness the whole fleet may make (SPEC §3, "a disable needs a witness"): only where no token
    /// of the project ever received a push (a new deployment), counted in the ledger's unwitnessed rows that
    /// `devices enable` did not restore. A witnessed disable is never counted or deferred.
    public static let unwitnessedDisableCap = 10
    /// The transaction-scoped advisory lock that orders the fleet's unwitnessed disables, so each counts the ledger
    /// with the others' in it (taken only by a flush that holds one; held until its commit; the worker's transactions
    /// are READ COMMITTED, so the statement after the lock sees every disable committed before it).
    static let unwitnessedDisableLock: Int64 = 0x6d77_6469_7362_726b  // "mwdisbrk"

    /// Taken before `disableDevicesQuery` in the same pipelined transaction (no round trip of its own).
    static var unwitnessedDisableLockQuery: PostgresQuery { "SELECT pg_advisory_xact_lock(\(unwitnessedDisableLock)::bigint)" }

    /// Disables devices whose token FCM called dead, unless the app re-registered them after the send began, and
    /// records each disable in `"PushDeviceDisabled"` in the same statement (the evidence, and the undo list for
    /// `devices enable`). An unwitnessed disable goes only while the fleet's unwitnessed disables number fewer than
    /// `unwitnessedDisableCap`; one deferred leaves its device enabled and its delivery PENDING (`completeQuery`'s DISABLE).
    /// The ledger's `"disabledAt"` is the device's new `"updatedAt"` (one `now()` per transaction): `devices enable`
    /// re-enables only devices nobody changed since. One entry per device: its id, when the send began, the reason
    /// code, the event key, FCM's error and whether FCM accepted a known-good token after the send began.
    static func disableDevicesQuery(ids: [String], started: [Date], reasons: [String], keys: [String], errors: [String],
                                    witnessed: [Bool]) -> PostgresQuery {
        """
        WITH v AS (
            SELECT * FROM unnest(\(ids)::text[], \(started)::timestamptz[], \(reasons)::text[], \(keys)::text[], \(errors)::text[],
                                 \(witnessed.map { $0 ? "true" : "false" })::boolean[]) WITH ORDINALITY AS v(id, started, reason, key, err, witnessed, n)
        ), candidates AS (
            SELECT DISTINCT ON (v.id) v.* FROM v JOIN "PushDevice" d ON d.id = v.id
            WHERE d."isEnabled" AND d."lastSeenAt" < v.started
            ORDER BY v.id, v.n
        ), admitted AS (
            -- In the flush's order, each unwitnessed one counts the ones before it.
            SELECT c.* FROM (
                SELECT c.*, count(*) FILTER (WHERE NOT c.witnessed) OVER (ORDER BY c.n) AS nth_unwitnessed FROM candidates c
            ) c
            WHERE c.witnessed OR \(sql: KnownGoodTokens.unwitnessedSinceAcceptedSQL) + c.nth_unwitnessed <= \(unwitnessedDisableCap)
        ), disabled AS (
            UPDATE "PushDevice" d
            SET "isEnabled" = false, "updatedAt" = now()
            FROM admitted a
            WHERE d.id = a.id AND d."isEnabled" AND d."lastSeenAt" < a.started
            RETURNING d.id
        )
        INSERT INTO "PushDeviceDisabled" ("pushDeviceId", reason, "eventKey", "lastError", "disabledAt", witnessed)
        SELECT a.id, a.reason, a.key, a.err, now(), a.witnessed
        FROM disabled JOIN admitted a ON a.id = disabled.id
        RETURNING "pushDeviceId" AS id
        """
    }

    /// The completion statement's verdict on an event: `EventFate.settled` written over its columns, so the rule has one
    /// text (`EventFateTests` checks the two agree); the statement writes what that verdict calls for.
    static let settledStatus: PostgresQuery =
        "\(unescaped: EventFate.settledStatusSQL(pending: "p.pending", attempts: "o.attempts", maxAttempts: "p.max_attempts"))"

    /// Delivery writes and event settlements in one statement (one round trip per completer flush):
    /// `delivered` writes each delivery under its lease; an event is DONE when no delivery of its patient and key is
    /// still PENDING (a delivery fanned out before migration 7 names no patient and counts for every event of its key) (the ones this statement just settled do not count: the EXISTS sees the statement's
    /// snapshot), else DEAD after the last attempt, else due again after its delay. One entry per delivery write
    /// (`deliveries` … `sendStartedAt`, the columns of `DeliveryWrite.columns`) and per event settlement (`events` …
    /// `expected`). A DISABLE write is FAILED when the flush's disable statement, earlier in the transaction, disabled
    /// the device or the app re-registered it after the send began; else the fleet's unwitnessed allowance deferred it and
    /// it stays PENDING, retried with its event.
    package static func completeQuery(deliveries ids: [String], kinds: [String], details: [String], tokens: [String], deliveryKeys: [String],
                              sentAt: [Double?], sendStartedAt: [Double?], maxAttempts: Int, events eventIds: [Int64], keys: [String],
                              patients: [String], delays: [Double], errors: [String?], leases: [String], expected: [String]) -> PostgresQuery {
        """
        WITH r AS (
            SELECT u.*, u.kind = \(literal: DeliveryWrite.Kind.disable) AND EXISTS (
                       -- Still enabled and not re-registered since the send began: the disable statement deferred it.
                       SELECT 1 FROM "PushDelivery" x JOIN "PushDevice" d ON d.id = x."pushDeviceId"
                       WHERE x.id = u.id AND d."isEnabled" AND d."lastSeenAt" < to_timestamp(u.started)) AS deferred
            FROM unnest(\(ids)::text[], \(kinds)::text[], \(details)::text[], \(tokens)::uuid[], \(deliveryKeys)::text[],
                        \(sentAt)::double precision[], \(sendStartedAt)::double precision[])
                AS u(id, kind, detail, token, key, sent_at, started)
        ), delivered AS (
            UPDATE "PushDelivery" pd
            SET status = CASE WHEN r.kind <> \(literal: DeliveryWrite.Kind.disable) THEN r.kind WHEN r.deferred THEN \(literal: DeliveryStatus.pending) ELSE \(literal: DeliveryStatus.failed) END,
                "sentAt" = coalesce(to_timestamp(r.sent_at), pd."sentAt"),
                "fcmMessageId" = CASE WHEN r.kind = \(literal: DeliveryWrite.Kind.sent) THEN r.detail ELSE pd."fcmMessageId" END,
                "lastError" = CASE WHEN r.kind = \(literal: DeliveryWrite.Kind.sent) THEN NULL
                                   WHEN r.deferred THEN 'DISABLE_DEFERRED: the fleet''s unwitnessed disables are used up (no token of the project ever received a push); retried: ' || r.detail
                                   ELSE r.detail END,
                "leaseToken" = NULL, "leaseExpiresAt" = NULL
            FROM r
            WHERE pd.id = r.id AND pd."leaseToken" = r.token AND pd.status = \(literal: DeliveryStatus.pending)
            RETURNING pd.id, pd.status
        ), missing AS MATERIALIZED (
            -- Keys with a result that found no row to write (computed once per flush; almost always empty).
            SELECT DISTINCT r.key FROM r LEFT JOIN delivered d ON d.id = r.id WHERE d.id IS NULL
        ), v AS (
            SELECT *, \(maxAttempts)::integer AS max_attempts
            FROM unnest(\(eventIds)::bigint[], \(keys)::text[], \(patients)::text[], \(delays)::double precision[], \(errors)::text[],
                        \(leases)::uuid[], \(expected)::text[])
                AS v(id, key, patient, delay, err, token, expected)
        ), p AS (
            -- Probed once per event, one walk of the key's rows (the LATERAL subquery's OFFSET 0 keeps the planner from
            -- copying it into each reading of `pending`: it did, four probes per event). DONE only on written evidence,
            -- never on the absence of rows: pending when a delivery of its key is PENDING (not counting the ones this
            -- statement settles), when a result of its key found no row to write, or when a delivery its attempt fanned out
            -- (`expected`: ids, comma-separated) is missing: a failover lost its fan-out and writes, and kept the claim.
            SELECT v.*, s.pending FROM v CROSS JOIN LATERAL (
                SELECT coalesce(bool_or(pd.status = \(literal: DeliveryStatus.pending)
                                     AND pd.id NOT IN (SELECT id FROM delivered WHERE status <> \(literal: DeliveryStatus.pending))), false)
                       OR count(*) FILTER (WHERE pd.id = ANY(string_to_array(v.expected, ','))) < cardinality(string_to_array(v.expected, ','))
                       OR v.key IN (SELECT key FROM missing) AS pending
                FROM "PushDelivery" pd WHERE pd."eventKey" = v.key AND (pd."patientId" = v.patient OR pd."patientId" IS NULL) OFFSET 0
            ) s
        )
        UPDATE "PushOutbox" o
        SET (status, "processedAt", "availableAt", "lastError") = (
                -- The verdict, computed once (`settledStatus`), picks what it writes.
                SELECT w.* FROM (VALUES (\(literal: OutboxStatus.done), now(), o."availableAt", NULL),
                                        (\(literal: OutboxStatus.pending), NULL, now() + make_interval(secs => p.delay), p.err),
                                        (\(literal: OutboxStatus.dead), now(), o."availableAt",
                                         'attempts exhausted (' || o.attempts || '): ' || coalesce(p.err, 'deliveries still pending'))
                ) AS w(status, processed, available, err) WHERE w.status = \(sql: settledStatus)),
            "eventKey" = p.key, "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM p
        WHERE o.id = p.id AND o."leaseToken" = p.token AND o.status = \(sql: stillPending)
        RETURNING o.id, o.status
        """
    }

    /// Final states decided without sending (bad input → DEAD, too old → EXPIRED), each under its event's lease.
    static func finishEventsQuery(ids: [Int64], statuses: [String], reasons: [String], leases: [String]) -> PostgresQuery {
        """
        UPDATE "PushOutbox" o
        SET status = v.status, "processedAt" = now(), "lastError" = v.err,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM unnest(\(ids)::bigint[], \(statuses)::text[], \(reasons)::text[], \(leases)::uuid[]) AS v(id, status, err, token)
        WHERE o.id = v.id AND o."leaseToken" = v.token AND o.status = \(sql: stillPending)
        """
    }

    /// What a completion wrote.
    struct CompletionSummary: Sendable {
        /// Event id → status written (events whose lease was lost are absent).
        var eventStatuses: [Int64: OutboxStatus] = [:]
        /// Devices actually disabled.
        var disabledDevices: [String] = []
    }

    /// Everything one completer flush writes, in one transaction.
    struct Completion: Sendable {
        /// Each answered delivery and what its row gets.
        var deliveries: [(send: PendingSend, write: DeliveryWrite)] = []
        var settlements: [EventSettlement] = []
        var finished: [FinishedEvent] = []
        /// Events given back unfinished (stop): due again at once, the attempt uncounted.
        var releasedEvents: [(id: Int64, lease: LeaseToken)] = []
        /// Deliveries never sent (stop, lost event lease): their lease is cleared.
        var releasedDeliveries: [(id: String, lease: LeaseToken)] = []

        var count: Int { deliveries.count + settlements.count + finished.count + releasedEvents.count + releasedDeliveries.count }
        var isEmpty: Bool { count == 0 }

        /// Each item on its own, to isolate one that a statement refuses.
        var singles: [Completion] {
            deliveries.map { Completion(deliveries: [$0]) } + settlements.map { Completion(settlements: [$0]) }
                + finished.map { Completion(finished: [$0]) } + releasedEvents.map { Completion(releasedEvents: [$0]) }
                + releasedDeliveries.map { Completion(releasedDeliveries: [$0]) }
        }

        mutating func append(_ other: Completion) {
            deliveries += other.deliveries
            settlements += other.settlements
            finished += other.finished
            releasedEvents += other.releasedEvents
            releasedDeliveries += other.releasedDeliveries
        }
    }

    /// Writes delivery results first, then event outcomes (which look at the deliveries), in one
    /// transaction, each row guarded by its own lease token. The statements do not depend on each
    /// other's results, so the transaction is one pipelined round trip (its settings, asynchronous
    /// commit among them, travel with it, never on a session a pooler would hand to someone else).
    func complete(_ completion: Completion, maxAttempts: Int) async throws -> CompletionSummary {
        let plan = Self.plan(completion, maxAttempts: maxAttempts)
        guard !plan.statements.isEmpty else { return CompletionSummary() }
        return try plan.summary(of: try await client.pipelinedTransaction(plan.statements.map(\.query), settings: settings(.generic)))
    }

    /// The statements of one flush, and how to read their answers.
    struct CompletionPlan {
        enum Role { case lock, disableDevices, finishEvents, complete, release }
        var statements: [(role: Role, query: PostgresQuery)] = []
        var finished: [FinishedEvent] = []

        func summary(of results: [PostgresRows]) throws -> CompletionSummary {
            var summary = CompletionSummary()
            for (statement, rows) in zip(statements, results) {
                switch statement.role {
                case .disableDevices: summary.disabledDevices = try rows.map { try $0["id"].string() }
                case .finishEvents: for item in finished { summary.eventStatuses[item.id] = item.status }
                case .complete:
                    for row in rows { summary.eventStatuses[try row["id"].decode(Int64.self)] = try row["status"].decode(OutboxStatus.self) }
                case .release, .lock: break
                }
            }
            return summary
        }
    }

    static func plan(_ completion: Completion, maxAttempts: Int) -> CompletionPlan {
        var written = DeliveryColumns(capacity: completion.deliveries.count), disable = DisableColumns()
        for (send, write) in completion.deliveries {
            written.append(send.delivery, write.columns)
            if case .disable(let answer, let witnessed, let sendStartedAt) = write {
                disable.append(send.delivery, answer, witnessed: witnessed, sendStartedAt: sendStartedAt)
            }
        }
        var plan = CompletionPlan()
        if !disable.ids.isEmpty {
            // The lock first, before any row lock of the flush, and only for a new deployment's unwitnessed disables.
            if disable.witnessed.contains(false) { plan.statements.append((.lock, unwitnessedDisableLockQuery)) }
            plan.statements.append((.disableDevices, disableDevicesQuery(ids: disable.ids, started: disable.started, reasons: disable.codes,
                                                                         keys: disable.keys, errors: disable.errors, witnessed: disable.witnessed)))
        }
        let finished = completion.finished
        if !finished.isEmpty {
            plan.finished = finished
            plan.statements.append((.finishEvents, finishEventsQuery(ids: finished.map(\.id), statuses: finished.map(\.status.rawValue),
                                                                     reasons: finished.map(\.reason), leases: finished.map(\.lease.text))))
        }
        let events = completion.settlements
        if !written.ids.isEmpty || !events.isEmpty {
            plan.statements.append((.complete, completeQuery(
                deliveries: written.ids, kinds: written.kinds, details: written.details, tokens: written.tokens, deliveryKeys: written.keys,
                sentAt: written.sentAt, sendStartedAt: written.sendStartedAt, maxAttempts: maxAttempts,
                events: events.map(\.id), keys: events.map(\.eventKey), patients: events.map(\.patientId), delays: events.map(\.retryDelay.asSeconds), errors: events.map(\.error),
                leases: events.map(\.lease.text), expected: events.map { $0.deliveryIds.joined(separator: ",") })))
        }
        let releasedDeliveries = completion.releasedDeliveries
        if !releasedDeliveries.isEmpty {
            plan.statements.append((.release, releaseDeliveriesQuery(ids: releasedDeliveries.map(\.id), leases: releasedDeliveries.map(\.lease.text))))
        }
        let releasedEvents = completion.releasedEvents
        if !releasedEvents.isEmpty {
            plan.statements.append((.release, releaseEventsQuery(ids: releasedEvents.map(\.id), leases: releasedEvents.map(\.lease.text))))
        }
        return plan
    }

    /// The completion statement's delivery columns, one entry per write.
    struct DeliveryColumns {
        var ids: [String] = [], kinds: [String] = [], details: [String] = [], tokens: [String] = [], keys: [String] = []
        var sentAt: [Double?] = [], sendStartedAt: [Double?] = []

        /// Room for `capacity` writes: one allocation per column per flush.
        init(capacity: Int) {
            ids.reserveCapacity(capacity); kinds.reserveCapacity(capacity); details.reserveCapacity(capacity)
            tokens.reserveCapacity(capacity); keys.reserveCapacity(capacity)
            sentAt.reserveCapacity(capacity); sendStartedAt.reserveCapacity(capacity)
        }

        mutating func append(_ delivery: ClaimedDelivery, _ columns: DeliveryWrite.Columns) {
            ids.append(delivery.id); keys.append(delivery.eventKey); tokens.append(delivery.lease.text)
            kinds.append(columns.kind.rawValue); details.append(columns.detail)
            sentAt.append(columns.sentAt); sendStartedAt.append(columns.sendStartedAt)
        }
    }

    /// The disable statement's columns, one entry per DISABLE write.
    struct DisableColumns {
        var ids: [String] = [], started: [Date] = [], codes: [String] = [], keys: [String] = [], errors: [String] = []
        var witnessed: [Bool] = []

        mutating func append(_ delivery: ClaimedDelivery, _ answer: DisablingAnswer, witnessed: Bool, sendStartedAt: Date) {
            ids.append(delivery.deviceId); started.append(sendStartedAt); codes.append(answer.deviceCode)
            keys.append(delivery.eventKey); errors.append(answer.reason); self.witnessed.append(witnessed)
        }
    }

    /// Events given back under their leases: due again at once, the attempt uncounted.
    static func releaseEventsQuery(ids: [Int64], leases: [String]) -> PostgresQuery {
        """
        UPDATE "PushOutbox" o
        SET "availableAt" = now(), attempts = greatest(o.attempts - 1, 0),
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM unnest(\(ids)::bigint[], \(leases)::uuid[]) AS v(id, token)
        WHERE o.id = v.id AND o."leaseToken" = v.token AND o.status = \(sql: stillPending)
        """
    }

    /// Deliveries never sent, given back under their leases: lease cleared, the attempt uncounted.
    static func releaseDeliveriesQuery(ids: [String], leases: [String]) -> PostgresQuery {
        """
        UPDATE "PushDelivery" pd
        SET "leaseToken" = NULL, "leaseExpiresAt" = NULL, attempts = greatest(pd.attempts - 1, 0)
        FROM unnest(\(ids)::text[], \(leases)::uuid[]) AS v(id, token)
        WHERE pd.id = v.id AND pd."leaseToken" = v.token AND pd.status = \(literal: DeliveryStatus.pending)
        """
    }

    /// Events whose fan-out the database did not finish this time (`EventFate.FanOutFailure.retry`): the lease cleared,
    /// the attempt counted, each due again after its delay with its reason in `"lastError"`.
    static func retryEventsQuery(ids: [Int64], delaysMs: [Int64], reasons: [String], leases: [String]) -> PostgresQuery {
        """
        UPDATE "PushOutbox" o
        SET "availableAt" = now() + make_interval(secs => v.delay_ms::double precision / 1000), "lastError" = v.err,
            "leasedBy" = NULL, "leaseToken" = NULL, "leaseExpiresAt" = NULL
        FROM unnest(\(ids)::bigint[], \(delaysMs)::bigint[], \(reasons)::text[], \(leases)::uuid[]) AS v(id, delay_ms, err, token)
        WHERE o.id = v.id AND o."leaseToken" = v.token AND o.status = \(sql: stillPending)
        """
    }

    func retry(events: [(id: Int64, lease: LeaseToken, delay: Duration, reason: String)]) async throws {
        guard !events.isEmpty else { return }
        try await client.withTransaction(settings: settings(.generic)) { connection in
            try connection.query(Self.retryEventsQuery(ids: events.map(\.id), delaysMs: events.map(\.delay.wholeMilliseconds),
                                                       reasons: events.map(\.reason), leases: events.map(\.lease.text)))
        }
    }

    /// Gives work that was never sent back (graceful stop, claim failure): due again at once, the attempt uncounted.
    func release(events: [(id: Int64, lease: LeaseToken)], deliveries: [(id: String, lease: LeaseToken)]) async throws {
        guard !events.isEmpty || !deliveries.isEmpty else { return }
        try await client.withTransaction(settings: settings(.generic)) { connection in
            if !deliveries.isEmpty {
                try connection.query(Self.releaseDeliveriesQuery(ids: deliveries.map(\.id), leases: deliveries.map(\.lease.text)))
            }
            if !events.isEmpty {
                try connection.query(Self.releaseEventsQuery(ids: events.map(\.id), leases: events.map(\.lease.text)))
            }
        }
    }

    // MARK: Lease heartbeat

    /// Events whose lease is still held, leased `lease` from now (and due again only then).
    static func extendEventsQuery(ids: [Int64], leases: [String], lease: Duration) -> PostgresQuery {
        """
        UPDATE "PushOutbox" o
        SET "leaseExpiresAt" = now() + make_interval(secs => \(lease.asSeconds)::double precision),
            "availableAt" = now() + make_interval(secs => \(lease.asSeconds)::double precision)
        FROM unnest(\(ids)::bigint[], \(leases)::uuid[]) AS v(id, token)
        WHERE o.id = v.id AND o."leaseToken" = v.token AND o.status = \(sql: stillPending)
        RETURNING o.id
        """
    }

    /// Deliveries whose lease is still held, leased `lease` from now.
    static func extendDeliveriesQuery(ids: [String], leases: [String], lease: Duration) -> PostgresQuery {
        """
        UPDATE "PushDelivery" pd
        SET "leaseExpiresAt" = now() + make_interval(secs => \(lease.asSeconds)::double precision)
        FROM unnest(\(ids)::text[], \(leases)::uuid[]) AS v(id, token)
        WHERE pd.id = v.id AND pd."leaseToken" = v.token AND pd.status = \(literal: DeliveryStatus.pending)
        RETURNING pd.id
        """
    }

    /// Extends the leases still held; returns the events and deliveries whose lease was confirmed. Deliveries first,
    /// then events: the order in which a completer flush locks them.
    func extendLeases(events: [(id: Int64, lease: LeaseToken)], deliveries: [(id: String, lease: LeaseToken)],
                      lease: Duration) async throws -> (events: Set<Int64>, deliveries: Set<String>) {
        try await client.withTransaction(settings: settings(.generic)) { connection in
            var keptEvents = Set<Int64>()
            var keptDeliveries = Set<String>()
            if !deliveries.isEmpty {
                for row in try connection.query(Self.extendDeliveriesQuery(ids: deliveries.map(\.id), leases: deliveries.map(\.lease.text), lease: lease)) {
                    keptDeliveries.insert(try row["id"].string())
                }
            }
            if !events.isEmpty {
                for row in try connection.query(Self.extendEventsQuery(ids: events.map(\.id), leases: events.map(\.lease.text), lease: lease)) {
                    keptEvents.insert(try row["id"].decode(Int64.self))
                }
            }
            return (keptEvents, keptDeliveries)
        }
    }
}

extension DeliveryWrite {
    /// What the completion statement writes to `status`: the status itself (`SENT`, `FAILED`, `PENDING`), or `DISABLE`:
    /// `FAILED` unless the fleet's allowance deferred the disable, then `PENDING`.
    enum Kind: String, PostgresLiteral {
        case sent = "SENT"
        case failed = "FAILED"
        case pending = "PENDING"
        case disable = "DISABLE"
    }

    /// The completion statement's columns for one write.
    struct Columns {
        var kind: Kind
        /// FCM's message name (`SENT`) or the reason (`"lastError"`).
        var detail: String
        /// `"sentAt"` in UNIX seconds: when FCM's answer came (`SENT` only).
        var sentAt: Double?
        /// When the send began, UNIX seconds (`DISABLE` only): a re-registration after it keeps the device.
        var sendStartedAt: Double?
    }

    /// The one place a write becomes the statement's columns (its kind among them): the writer derives nothing else.
    var columns: Columns {
        switch self {
        case .sent(let name, let answeredAt):
            Columns(kind: .sent, detail: name, sentAt: answeredAt.timeIntervalSince1970)
        case .failed(let reason): Columns(kind: .failed, detail: reason)
        case .pending(let reason, _): Columns(kind: .pending, detail: reason)
        case .disable(let answer, _, let sendStartedAt):
            Columns(kind: .disable, detail: answer.reason, sendStartedAt: sendStartedAt.timeIntervalSince1970)
        }
    }
}
