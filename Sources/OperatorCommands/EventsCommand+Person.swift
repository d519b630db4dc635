import FoundationEssentials
import JSON
import Outbox
import Postgres
import TextSupport

/// `events --patient ID | --caregiver ID`: "my phone did not show mother's 8 o'clock dose", answered without SQL. The
/// person's events, each with the fate of every device of the caregiver (or of the patient's caregivers).
extension EventsCommand {
    /// A registration of a caregiver in scope, with what the recipients rule says of it now.
    struct Device: Sendable {
        var id: String
        var ownerId: String
        var token: String
        var enabled: Bool
        var lastSeenAt: Date?
        var createdAt: Date?
        /// `Recipients.speaksForToken`: no other registration of the token was seen more recently (`devices --owner`).
        var speaksForToken: Bool
        /// When it does not: the registration that does.
        var newest: Newest?

        struct Newest: Sendable {
            var deviceId: String
            var ownerId: String
            var enabled: Bool
            var lastSeenAt: Date?

            var json: JSONValue {
                .object(["pushDeviceId": .string(deviceId), "ownerId": .string(ownerId), "isEnabled": .bool(enabled),
                         "lastSeenAt": CommandValues.timestamp(lastSeenAt)])
            }
        }

        /// The select list `init(_:)` reads (device `d`, its token's newest registration `n` when `d` does not speak for it).
        static let query: PostgresQuery = """
            SELECT d.id, d."ownerId" AS owner_id, \(sql: EventCommand.maskedToken) AS token, d."isEnabled" AS enabled,
                   d."lastSeenAt" AS last_seen, d."createdAt" AS created_at, \(sql: Recipients.speaksForToken("d")) AS speaks,
                   n.id AS newer_id, n."ownerId" AS newer_owner, n."isEnabled" AS newer_enabled, n."lastSeenAt" AS newer_seen
            FROM "PushDevice" d
            LEFT JOIN LATERAL (
                SELECT n.id, n."ownerId", n."isEnabled", n."lastSeenAt" FROM "PushDevice" n
                WHERE n.token = d.token ORDER BY n."lastSeenAt" DESC NULLS LAST, n.id DESC LIMIT 1
            ) n ON NOT \(sql: Recipients.speaksForToken("d"))
            """

        init(_ row: PostgresRow) throws {
            id = try row["id"].string()
            ownerId = try row["owner_id"].string()
            token = row["token"].optionalString() ?? "…"
            enabled = try row["enabled"].bool()
            lastSeenAt = try row["last_seen"].optionalDate()
            createdAt = try row["created_at"].optionalDate()
            speaksForToken = try row["speaks"].bool()
            newest = try row["newer_id"].optionalString().map { id in
                Newest(deviceId: id, ownerId: try row["newer_owner"].string(), enabled: try row["newer_enabled"].bool(),
                       lastSeenAt: try row["newer_seen"].optionalDate())
            }
        }
    }

    /// A row of the disable ledger.
    struct LedgerDisable: Sendable {
        var deviceId: String
        var reason: String
        var disabledAt: Date
        var restoredAt: Date?
        var witnessed: Bool
        var lastError: String?
        var eventKey: String?

        static let query: PostgresQuery = """
            SELECT "pushDeviceId" AS device_id, reason, "disabledAt" AS disabled_at, "restoredAt" AS restored_at, witnessed,
                   "lastError" AS last_error, "eventKey" AS event_key
            FROM "PushDeviceDisabled"
            """

        init(_ row: PostgresRow) throws {
            deviceId = try row["device_id"].string()
            reason = try row["reason"].string()
            disabledAt = try row["disabled_at"].date()
            restoredAt = try row["restored_at"].optionalDate()
            witnessed = try row["witnessed"].bool()
            lastError = row["last_error"].optionalString()
            eventKey = row["event_key"].optionalString()
        }

        var json: JSONValue {
            .object(["reason": .string(reason), "disabledAt": CommandValues.timestamp(disabledAt), "restoredAt": CommandValues.timestamp(restoredAt),
                     "witnessed": .bool(witnessed), "lastError": CommandValues.text(lastError), "eventKey": CommandValues.text(eventKey)])
        }
    }

    /// A delivery of an event key to a device in scope.
    struct KeyedDelivery: Sendable {
        var id: String
        var eventKey: String
        var patientId: String?
        var deviceId: String
        var status: DeliveryStatus
        var attempts: Int
        var lastError: String?
        var sentAt: Date?
        var fcmMessageId: String?

        /// A row of `keyedDeliveriesQuery`.
        init(_ row: PostgresRow) throws {
            id = try row["id"].string()
            eventKey = try row["event_key"].string()
            patientId = row["patient_id"].optionalString()
            deviceId = try row["device_id"].string()
            status = try row["status"].decode(DeliveryStatus.self)
            attempts = try row["attempts"].int()
            lastError = row["last_error"].optionalString()
            sentAt = try row["sent_at"].optionalDate()
            fcmMessageId = row["message_id"].optionalString()
        }
    }

    /// What became of one event on one device: the outcome (`SENT`, `FAILED`, `PENDING`, `SKIPPED`, `NO_DELIVERY`), a
    /// code for scripts, and the sentence for people.
    struct Fate: Sendable {
        var outcome: String
        var reason: String?
        var text: String
        var delivery: KeyedDelivery?
        var disable: LedgerDisable?
        var newest: Device.Newest?
    }

    /// The fate of `event` on `device`: its delivery when there is one, else why there is none: the recipients rule's
    /// refusal for the event's patient (`Recipients.refusal`, in its order: enabled, link, token; a disable the worker
    /// made, in force when the event was fanned out, named as such), then what the event's own state explains.
    static func fate(event: EventCommand.Event, device: Device, linkStatus: String, refusal: Recipients.Refusal?, delivery: KeyedDelivery?,
                     disables: [LedgerDisable]) -> Fate {
        if let delivery { return fate(delivery) }
        // A disable in force when the event was fanned out (before it settled, and not restored before it was created).
        let fannedOutBy = event.processedAt ?? Date()
        let disable = disables.filter { $0.disabledAt <= fannedOutBy && ($0.restoredAt.map { $0 > event.createdAt } ?? true) }
            .max { $0.disabledAt < $1.disabledAt }
        switch refusal {
        case .deviceDeleted?, .deviceDisabled?:
            if let disable { return fate(disable) }
            return Fate(outcome: "SKIPPED", reason: "switched_off",
                        text: "skipped: pushes switched off for this registration (\"isEnabled\" false, not by the worker)")
        case .linkNotActive?:
            return Fate(outcome: "SKIPPED", reason: "link_not_active",
                        text: "skipped: the caregiver's link to patient \(Printable.escaped(event.patientId)) is \(Printable.escaped(linkStatus)), not ACTIVE")
        case .tokenSuperseded?, nil:
            if let disable { return fate(disable) }  // disabled then, restored since
        }
        if refusal == .tokenSuperseded {
            let newest = device.newest
            return Fate(outcome: "SKIPPED", reason: "token_superseded",
                        text: "skipped: superseded by another registration of this phone: device \(Printable.escaped(newest?.deviceId ?? "?")) of "
                            + "\(Printable.escaped(newest?.ownerId ?? "?")), last seen \(newest?.lastSeenAt.map(CommandValues.timestamp) ?? "-")"
                            + (newest?.enabled == false ? ", pushes switched off there" : ""),
                        newest: newest)
        }
        if let created = device.createdAt, created > event.createdAt {
            return Fate(outcome: "NO_DELIVERY", reason: "not_registered_yet",
                        text: "no delivery: the device was registered at \(CommandValues.timestamp(created)), after the event")
        }
        switch event.status {
        case .pending:
            return Fate(outcome: "PENDING", reason: "event_pending", text: "not sent yet: the event is PENDING (next due \(CommandValues.timestamp(event.availableAt)))")
        case .expired:
            return Fate(outcome: "NO_DELIVERY", reason: "event_expired", text: "no delivery: the event expired unsent (older than EVENT_MAX_AGE when claimed)")
        case .dead:
            return Fate(outcome: "NO_DELIVERY", reason: "event_dead", text: "no delivery: the event is DEAD: " + Printable.escaped(event.lastError ?? "-"))
        case .done:
            return Fate(outcome: "NO_DELIVERY", reason: "no_delivery_row",
                        text: "no delivery row (pruned after DELIVERY_RETENTION, or the device qualified only after the fan-out)")
        }
    }

    /// The fate a delivery row tells.
    static func fate(_ delivery: KeyedDelivery) -> Fate {
        switch delivery.status {
        case .sent:
            Fate(outcome: "SENT", reason: nil, text: "SENT at " + (delivery.sentAt.map(CommandValues.timestamp) ?? "?")
                + (delivery.fcmMessageId.map { " (\(Printable.escaped($0)))" } ?? ""), delivery: delivery)
        case .failed:
            Fate(outcome: "FAILED", reason: "delivery_failed", text: "FAILED: " + Printable.escaped(delivery.lastError ?? "-"), delivery: delivery)
        case .pending:
            Fate(outcome: "PENDING", reason: "delivery_pending", text: "PENDING after \(delivery.attempts) attempt(s)"
                + (delivery.lastError.map { ": " + Printable.escaped($0) } ?? ""), delivery: delivery)
        }
    }

    /// No delivery because the worker disabled the device.
    static func fate(_ disable: LedgerDisable) -> Fate {
        Fate(outcome: "NO_DELIVERY", reason: "device_disabled",
             text: "no delivery: the device was disabled at \(CommandValues.timestamp(disable.disabledAt)) (\(Printable.escaped(disable.reason)), "
                + (disable.witnessed ? "witnessed" : "unwitnessed") + ")"
                + (disable.restoredAt.map { ", restored at \(CommandValues.timestamp($0))" } ?? ""),
             disable: disable)
    }

    struct PersonReport: CommandReport {
        var person: Person
        var since: Duration
        var limit: Int
        var patients: [String]
        var events: [(event: EventCommand.Event, devices: [(device: Device, fate: Fate)])]

        var who: String {
            switch person {
            case .patient(let id): "patient \(Printable.escaped(id))"
            case .caregiver(let id): "caregiver \(Printable.escaped(id))"
            }
        }

        var text: String {
            let window = "created within \(CommandValues.age(since.asSeconds))"
            var lines: [String] = []
            if case .caregiver = person {
                lines.append("\(who): linked to " + (patients.isEmpty ? "no patient" : "patient(s) " + patients.map(Printable.escaped).joined(separator: ", ")))
            }
            guard !events.isEmpty else { return (lines + ["no events of \(who) \(window)"]).joined(separator: "\n") }
            let more = events.count == limit ? " (the newest \(limit); --limit for more)" : ""
            lines.append("\(events.count) event(s) of \(who) \(window)\(more)")
            for (event, devices) in events {
                lines.append("event \(event.id)  \(CommandValues.timestamp(event.createdAt))  \(event.status.rawValue)  patient \(Printable.escaped(event.patientId))"
                    + "  key \(Printable.escaped(event.eventKey ?? event.computedKey ?? "-"))")
                if devices.isEmpty { lines.append("  no device of a linked caregiver: nobody to send to") }
                for (device, fate) in devices {
                    lines.append("  device \(Printable.escaped(device.id))  \(Printable.escaped(device.token))  of \(Printable.escaped(device.ownerId))  \(fate.text)")
                }
            }
            return lines.joined(separator: "\n")
        }

        var json: JSONValue {
            var object: [String: JSONValue] = ["sinceSeconds": .number(since.asSeconds), "limit": .number(Double(limit)),
                                               "patients": .array(patients.map(JSONValue.string))]
            switch person {
            case .patient(let id): object["patientId"] = .string(id)
            case .caregiver(let id): object["caregiverId"] = .string(id)
            }
            object["events"] = .array(events.map { event, devices in
                .object(["event": event.json, "devices": .array(devices.map { device, fate in
                    .object([
                        "pushDeviceId": .string(device.id), "ownerId": .string(device.ownerId), "token": .string(device.token),
                        "outcome": .string(fate.outcome), "reason": CommandValues.text(fate.reason), "detail": .string(fate.text),
                        "delivery": fate.delivery.map { delivery in
                            .object(["id": .string(delivery.id), "status": .string(delivery.status.rawValue), "attempts": .number(Double(delivery.attempts)),
                                     "lastError": CommandValues.text(delivery.lastError), "sentAt": CommandValues.timestamp(delivery.sentAt),
                                     "fcmMessageId": CommandValues.text(delivery.fcmMessageId)])
                        } ?? .null,
                        "disable": fate.disable?.json ?? .null, "newestRegistration": fate.newest?.json ?? .null,
                    ])
                })])
            })
            return .object(object)
        }
    }

    /// The person's links (any status): patients and caregivers in scope.
    static func linksQuery(_ person: Person) -> PostgresQuery {
        switch person {
        case .patient(let id):
            #"SELECT "patientId" AS patient_id, "caregiverId" AS caregiver_id, status FROM "CaregiverPatientLink" WHERE "patientId" = \#(id)"#
        case .caregiver(let id):
            #"SELECT "patientId" AS patient_id, "caregiverId" AS caregiver_id, status FROM "CaregiverPatientLink" WHERE "caregiverId" = \#(id)"#
        }
    }

    /// Whether the id names anyone: a `"Patient"` row, or a caregiver with a link or a registration.
    static func existsQuery(_ person: Person) -> PostgresQuery {
        switch person {
        case .patient(let id):
            #"SELECT EXISTS (SELECT 1 FROM "Patient" WHERE id = \#(id)) AS found"#
        case .caregiver(let id):
            #"""
            SELECT EXISTS (SELECT 1 FROM "CaregiverPatientLink" WHERE "caregiverId" = \#(id))
                OR EXISTS (SELECT 1 FROM "PushDevice" WHERE "ownerType" = \#(literal: OwnerType.caregiver) AND "ownerId" = \#(id)) AS found
            """#
        }
    }

    /// The newest events of `patients` created within `since`, at most `limit`.
    static func personEventsQuery(patients: [String], since: Duration, limit: Int) -> PostgresQuery {
        """
        SELECT \(sql: EventCommand.Event.columns) FROM "PushOutbox" o
        WHERE o."patientId" = ANY(\(patients)::text[]) AND o."createdAt" > now() - make_interval(secs => \(since.asSeconds)::double precision)
        ORDER BY o."createdAt" DESC, o.id DESC LIMIT \(limit)
        """
    }

    /// The deliveries of `keys` to `devices`.
    static func keyedDeliveriesQuery(keys: [String], devices: [String]) -> PostgresQuery {
        """
        SELECT pd.id, pd."eventKey" AS event_key, pd."patientId" AS patient_id, pd."pushDeviceId" AS device_id, pd.status, pd.attempts,
               pd."lastError" AS last_error, pd."sentAt" AS sent_at, pd."fcmMessageId" AS message_id
        FROM "PushDelivery" pd WHERE pd."eventKey" = ANY(\(keys)::text[]) AND pd."pushDeviceId" = ANY(\(devices)::text[])
        """
    }

    /// Why each of `devices` does not receive each of `patients`' pushes (`Recipients.refusal`; NULL: it does).
    static func refusalsQuery(devices: [String], patients: [String]) -> PostgresQuery {
        """
        SELECT d.id AS device_id, p.id AS patient_id, \(sql: Recipients.refusal(device: "d", patient: "p.id")) AS refusal
        FROM "PushDevice" d CROSS JOIN unnest(\(patients)::text[]) AS p(id)
        WHERE d.id = ANY(\(devices)::text[])
        """
    }

    func runForPerson(_ person: Person, _ context: CommandContext) async throws -> any CommandReport {
        let (since, limit) = (self.since ?? Self.defaultPersonWindow, self.limit)
        return try await context.withDatabase { client, _ in
            try await client.withConnection { connection in
                guard try connection.query(Self.existsQuery(person))[0]["found"].bool() else {
                    switch person {
                    case .patient(let id):
                        throw CommandFailure("no patient has id \(Printable.escaped(id)) (no \"Patient\" row)", details: ["patientId": .string(id)])
                    case .caregiver(let id):
                        throw CommandFailure("no caregiver has id \(Printable.escaped(id)) (no link and no registered device)", details: ["caregiverId": .string(id)])
                    }
                }
                var links: [String: [String: String]] = [:]  // patient → caregiver → link status (ACTIVE wins)
                for row in try connection.query(Self.linksQuery(person)) {
                    let (patient, caregiver, status) = (try row["patient_id"].string(), try row["caregiver_id"].string(), try row["status"].string())
                    if links[patient]?[caregiver] != "ACTIVE" { links[patient, default: [:]][caregiver] = status }
                }
                let patients: [String]
                let caregivers: [String]
                switch person {
                case .patient(let id): (patients, caregivers) = ([id], (links[id].map { Array($0.keys) } ?? []).sorted())
                case .caregiver(let id): (patients, caregivers) = (links.keys.sorted(), [id])
                }
                let devices = try connection.query(#"""
                    \#(sql: Device.query) WHERE d."ownerType" = \#(literal: OwnerType.caregiver) AND d."ownerId" = ANY(\#(caregivers)::text[]) ORDER BY d."ownerId", d.id
                    """#).map(Device.init)
                let deviceIds = devices.map(\.id)
                var disables: [String: [LedgerDisable]] = [:]
                for row in try connection.query(#"\#(sql: LedgerDisable.query) WHERE "pushDeviceId" = ANY(\#(deviceIds)::text[])"#) {
                    let disable = try LedgerDisable(row)
                    disables[disable.deviceId, default: []].append(disable)
                }
                let events = try connection.query(Self.personEventsQuery(patients: patients, since: since, limit: limit)).map(EventCommand.Event.init)
                let keys = Array(Set(events.compactMap { $0.eventKey ?? $0.computedKey }))
                let deliveries = try connection.query(Self.keyedDeliveriesQuery(keys: keys, devices: deviceIds)).map(KeyedDelivery.init)
                var refusals: [String: [String: Recipients.Refusal]] = [:]  // patient → device → why not a recipient
                for row in try connection.query(Self.refusalsQuery(devices: deviceIds, patients: patients)) {
                    refusals[try row["patient_id"].string(), default: [:]][try row["device_id"].string()] = try Recipients.refusal(row["refusal"])
                }
                let listed = events.map { event in
                    let key = event.eventKey ?? event.computedKey
                    let linked = links[event.patientId] ?? [:]
                    let fates = devices.filter { linked[$0.ownerId] != nil }.map { device in
                        // A delivery of this patient's event (a row naming no patient predates migration 7: it goes with its key).
                        let delivery = deliveries.first { $0.deviceId == device.id && $0.eventKey == key && ($0.patientId == event.patientId || $0.patientId == nil) }
                        return (device, Self.fate(event: event, device: device, linkStatus: linked[device.ownerId] ?? "absent",
                                                  refusal: refusals[event.patientId]?[device.id], delivery: delivery, disables: disables[device.id] ?? []))
                    }
                    return (event: event, devices: fates)
                }
                return PersonReport(person: person, since: since, limit: limit, patients: patients, events: listed) as any CommandReport
            }
        }
    }
}
