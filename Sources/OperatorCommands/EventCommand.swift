import FoundationEssentials
import JSON
import Outbox
import Postgres
import TextSupport

/// `event ID|EVENT_KEY`: one outbox event, every delivery of its patient and key, and the devices not sent to because
/// another registration speaks for their token; tokens masked.
struct EventCommand: OperatorCommand {
    static let name = "event"
    static let summary = "Show one event (by id or event key) with every delivery."
    static let help = """
        Usage: medication-worker event ID|EVENT_KEY [--json]

        Shows one outbox event (by its numeric id, or by its event key such as doseTaken:group-uuid-1; the
        newest event with that key, also before the key is written when the event settles: it is computed
        from the payload as the claim computes it) and every delivery of its patient and key: delivery id,
        device id, the token's first and last 6 characters only, the device enabled or not, status, attempts,
        "lastError", "sentAt" and "fcmMessageId". Then the patient's caregivers' devices that are not sent to
        because another registration of the same token was seen more recently (the phone changed hands, or
        pushes were switched off there), each with that registration, as the tables stand now.
        Exit status 1 when no such event exists.
        Next: `redrive --event ID` for a DEAD event, `resend --event ID` for FAILED deliveries.

        Options:
          --json    One JSON document: {"event": {...}, "deliveries": [...], "skipped": [...]}.
        """

    /// The event's id, or its key.
    enum Selector: Sendable {
        case id(Int64)
        case key(String)
    }

    let selector: Selector

    init(arguments: inout CommandArguments) throws(UsageError) {
        guard let target = arguments.positional(), !target.isEmpty else { throw UsageError("event needs an event id or an event key") }
        if let id = Int64(target) {
            guard id > 0 else { throw UsageError("an event id is a positive integer, got \(Printable.escaped(target))") }
            selector = .id(id)
        } else {
            selector = .key(target)
        }
    }

    /// An outbox event as the commands show it.
    struct Event: Sendable {
        var id: Int64
        var eventType: String
        var patientId: String
        var eventKey: String?
        var status: OutboxStatus
        var attempts: Int
        var createdAt: Date
        var availableAt: Date
        var processedAt: Date?
        var leasedBy: String?
        var leaseExpiresAt: Date?
        var lastError: String?
        /// The payload as text, to compute the key of an event not settled yet (`EventCommand+Key.swift`).
        var payload: String?

        var json: JSONValue {
            .object([
                "id": .number(Double(id)), "eventType": .string(eventType), "patientId": .string(patientId),
                "eventKey": CommandValues.text(eventKey), "computedEventKey": CommandValues.text(computedKey),
                "status": .string(status.rawValue), "attempts": .number(Double(attempts)),
                "createdAt": CommandValues.timestamp(createdAt), "availableAt": CommandValues.timestamp(availableAt),
                "processedAt": CommandValues.timestamp(processedAt), "leasedBy": CommandValues.text(leasedBy),
                "leaseExpiresAt": CommandValues.timestamp(leaseExpiresAt), "lastError": CommandValues.text(lastError),
            ])
        }

        /// The select list `init(_:)` reads (outbox `o`).
        static let columns: PostgresQuery = """
            o.id, o."eventType" AS event_type, o."patientId" AS patient_id, o."eventKey" AS event_key, o.status, o.attempts,
            o."createdAt" AS created_at, o."availableAt" AS available_at, o."processedAt" AS processed_at,
            o."leasedBy" AS leased_by, o."leaseExpiresAt" AS lease_expires_at, o."lastError" AS last_error, o.payload::text AS payload
            """

        init(_ row: PostgresRow) throws {
            id = Int64(try row["id"].int())
            eventType = try row["event_type"].string()
            patientId = try row["patient_id"].string()
            eventKey = row["event_key"].optionalString()
            status = try row["status"].decode(OutboxStatus.self)
            attempts = try row["attempts"].int()
            createdAt = try row["created_at"].date()
            availableAt = try row["available_at"].date()
            processedAt = try row["processed_at"].optionalDate()
            leasedBy = row["leased_by"].optionalString()
            leaseExpiresAt = try row["lease_expires_at"].optionalDate()
            lastError = row["last_error"].optionalString()
            payload = row["payload"].optionalString()
        }
    }

    /// One delivery; the token is masked in SQL, so the whole token never reaches this process.
    struct Delivery: Sendable {
        var id: String
        var deviceId: String
        var token: String
        var deviceEnabled: Bool?
        var status: DeliveryStatus
        var attempts: Int
        var lastError: String?
        var createdAt: Date
        var sentAt: Date?
        var fcmMessageId: String?

        var json: JSONValue {
            .object([
                "id": .string(id), "pushDeviceId": .string(deviceId), "token": .string(token),
                "deviceEnabled": deviceEnabled.map(JSONValue.bool) ?? .null, "status": .string(status.rawValue),
                "attempts": .number(Double(attempts)), "lastError": CommandValues.text(lastError),
                "createdAt": CommandValues.timestamp(createdAt), "sentAt": CommandValues.timestamp(sentAt),
                "fcmMessageId": CommandValues.text(fcmMessageId),
            ])
        }
    }

    /// A device of the patient's caregivers that is not sent to only because another registration speaks for its token
    /// (`device.newest`).
    struct Skipped: Sendable {
        var device: EventsCommand.Device

        var reason: String {
            let newest = device.newest
            return "another registration of this token was seen more recently: device \(newest?.deviceId ?? "?") of \(newest?.ownerId ?? "?"), last seen "
                + (newest?.lastSeenAt.map(CommandValues.timestamp) ?? "-") + (newest?.enabled == false ? ", pushes switched off there" : "")
        }

        var json: JSONValue {
            .object([
                "pushDeviceId": .string(device.id), "ownerId": .string(device.ownerId), "token": .string(device.token),
                "reason": .string(Recipients.Refusal.tokenSuperseded.rawValue), "newestRegistration": device.newest?.json ?? .null,
            ])
        }
    }

    /// Event `id`.
    static func eventQuery(id: Int64) -> PostgresQuery { #"SELECT \#(sql: Event.columns) FROM "PushOutbox" o WHERE o.id = \#(id)"# }

    /// The newest event with event key `key`.
    static func eventQuery(key: String) -> PostgresQuery {
        #"SELECT \#(sql: Event.columns) FROM "PushOutbox" o WHERE o."eventKey" = \#(key) ORDER BY o.id DESC LIMIT 1"#
    }

    /// A token as its first and last 6 characters (all of it hidden when shorter than 16), over column `d.token`.
    static let maskedToken: PostgresQuery = "CASE WHEN length(d.token) >= 16 THEN left(d.token, 6) || '…' || right(d.token, 6) ELSE '…' END"

    /// The deliveries of patient `patient`'s event key `key` (a row that names no patient, written before migration 7
    /// or by the API's inline sender, counts for every event of its key).
    static func deliveriesQuery(key: String, patient: String) -> PostgresQuery {
        """
        SELECT pd.id, pd."pushDeviceId" AS device_id,
               \(sql: maskedToken) AS token, d."isEnabled" AS enabled, pd.status, pd.attempts, pd."lastError" AS last_error, pd."createdAt" AS created_at,
               pd."sentAt" AS sent_at, pd."fcmMessageId" AS message_id
        FROM "PushDelivery" pd LEFT JOIN "PushDevice" d ON d.id = pd."pushDeviceId"
        WHERE pd."eventKey" = \(key) AND (pd."patientId" = \(patient) OR pd."patientId" IS NULL)
        ORDER BY pd."createdAt", pd.id
        """
    }

    /// The devices of patient `patient`'s caregivers with no delivery of `key` (nil: the event has no key yet) that the
    /// recipients rule refuses only for their token (`Recipients.refusal`, as the fan-out skips them), with the newest
    /// registration of the token.
    static func skippedQuery(key: String?, patient: String) -> PostgresQuery {
        """
        \(sql: EventsCommand.Device.query)
        WHERE d."ownerType" = \(literal: OwnerType.caregiver) AND d."ownerId" IN (SELECT l."caregiverId" FROM "CaregiverPatientLink" l WHERE l."patientId" = \(patient))
          AND \(sql: Recipients.refusal(device: "d", patient: "\(patient)")) = \(sql: Recipients.code(.tokenSuperseded))
          AND NOT EXISTS (SELECT 1 FROM "PushDelivery" pd WHERE pd."eventKey" = \(key) AND pd."pushDeviceId" = d.id)
        ORDER BY d.id
        """
    }

    struct Report: CommandReport {
        var event: Event
        var deliveries: [Delivery]
        var skipped: [Skipped]
        var eventMaxAge: Duration

        var text: String {
            var lines = [
                "event \(event.id)  \(event.status.rawValue)  \(Printable.escaped(event.eventType))  patient \(Printable.escaped(event.patientId))",
                "  key:        \(event.keyLine)",
                "  created:    \(CommandValues.timestamp(event.createdAt))  (expires unsent after EVENT_MAX_AGE \(CommandValues.age(eventMaxAge.asSeconds)))",
                // Only a PENDING event is due again; a finished one's "availableAt" is where its last lease left it.
                "  attempts:   \(event.attempts)" + (event.status == .pending ? "  next due \(CommandValues.timestamp(event.availableAt))" : ""),
            ]
            if let processedAt = event.processedAt { lines.append("  finished:   \(CommandValues.timestamp(processedAt))") }
            if let leasedBy = event.leasedBy, let until = event.leaseExpiresAt {
                lines.append("  leased by:  \(Printable.escaped(leasedBy)) until \(CommandValues.timestamp(until))")
            }
            if let lastError = event.lastError { lines.append("  last error: \(Printable.escaped(lastError))") }
            lines.append("deliveries: \(deliveries.count)")
            if !deliveries.isEmpty {
                let rows = deliveries.map { delivery in
                    [delivery.id, delivery.deviceId, delivery.token, delivery.deviceEnabled.map { $0 ? "yes" : "no" } ?? "gone",
                     delivery.status.rawValue, String(delivery.attempts), delivery.sentAt.map(CommandValues.timestamp) ?? "-",
                     delivery.fcmMessageId ?? "-", delivery.lastError ?? "-"]
                }
                lines.append(CommandValues.table(["DELIVERY", "DEVICE", "TOKEN", "ENABLED", "STATUS", "ATTEMPTS", "SENT AT", "FCM MESSAGE", "LAST ERROR"], rows))
            }
            if !skipped.isEmpty {
                lines.append("not sent to (another registration speaks for the token): \(skipped.count)")
                lines.append(CommandValues.table(["DEVICE", "OWNER", "TOKEN", "WHY"], skipped.map { [$0.device.id, $0.device.ownerId, $0.device.token, $0.reason] }))
            }
            return lines.joined(separator: "\n")
        }

        var json: JSONValue {
            .object(["event": event.json, "deliveries": .array(deliveries.map(\.json)), "skipped": .array(skipped.map(\.json))])
        }
    }

    func run(_ context: CommandContext) async throws -> any CommandReport {
        let selector = self.selector
        return try await context.withDatabase { client, settings in
            try await client.withConnection { connection in
                let rows: PostgresRows
                switch selector {
                case .id(let id): rows = try connection.query(Self.eventQuery(id: id))
                case .key(let key): rows = try Self.eventRows(key: key, connection)
                }
                guard let row = rows.first else {
                    switch selector {
                    case .id(let id): throw CommandFailure("no outbox event has id \(id)", details: ["id": .number(Double(id))])
                    case .key(let key): throw CommandFailure("no outbox event has event key \(Printable.escaped(key))", details: ["eventKey": .string(key)])
                    }
                }
                let event = try Event(row)
                let deliveries = try (event.eventKey ?? event.computedKey).map { key in
                    try connection.query(Self.deliveriesQuery(key: key, patient: event.patientId)).map { row in
                        Delivery(id: try row["id"].string(), deviceId: try row["device_id"].string(), token: row["token"].optionalString() ?? "…",
                                 deviceEnabled: row["enabled"].isNull ? nil : try row["enabled"].bool(), status: try row["status"].decode(DeliveryStatus.self),
                                 attempts: try row["attempts"].int(), lastError: row["last_error"].optionalString(),
                                 createdAt: try row["created_at"].date(), sentAt: try row["sent_at"].optionalDate(),
                                 fcmMessageId: row["message_id"].optionalString())
                    }
                } ?? []
                let skipped = try connection.query(Self.skippedQuery(key: event.eventKey ?? event.computedKey, patient: event.patientId))
                    .map { Skipped(device: try EventsCommand.Device($0)) }
                return Report(event: event, deliveries: deliveries, skipped: skipped, eventMaxAge: settings.eventMaxAge)
            }
        }
    }
}
