import FoundationEssentials
import JSON
import Outbox
import Postgres
import TextSupport

/// `devices --owner ID`: a caregiver's registrations, each with when it was last seen, last pushed, last disabled (and
/// why, and whether restored), and whether another registration of the same phone now speaks for its token.
extension DevicesCommand {
    /// One registration with its history.
    struct Registration: Sendable {
        var device: EventsCommand.Device
        var lastSent: (at: Date?, eventKey: String, deliveryId: String)?
        var lastDisable: EventsCommand.LedgerDisable?

        var json: JSONValue {
            .object([
                "pushDeviceId": .string(device.id), "token": .string(device.token), "isEnabled": .bool(device.enabled),
                "lastSeenAt": CommandValues.timestamp(device.lastSeenAt), "createdAt": CommandValues.timestamp(device.createdAt),
                "lastSent": lastSent.map { .object(["sentAt": CommandValues.timestamp($0.at), "eventKey": .string($0.eventKey), "deliveryId": .string($0.deliveryId)]) } ?? .null,
                "lastDisable": lastDisable?.json ?? .null,
                "speaksForToken": .bool(device.speaksForToken), "newestRegistration": device.newest?.json ?? .null,
            ])
        }

        var lines: [String] {
            let seen = device.lastSeenAt.map(CommandValues.timestamp) ?? "-"
            var lines = ["device \(Printable.escaped(device.id))  \(Printable.escaped(device.token))  \(device.enabled ? "enabled" : "DISABLED")  last seen \(seen)"
                + (device.createdAt.map { "  registered \(CommandValues.timestamp($0))" } ?? "")]
            lines.append("  last sent:    " + (lastSent.map { "\($0.at.map(CommandValues.timestamp) ?? "?") (event key \(Printable.escaped($0.eventKey)))" } ?? "never (no SENT delivery kept)"))
            if let disable = lastDisable {
                lines.append("  last disable: \(CommandValues.timestamp(disable.disabledAt)) \(Printable.escaped(disable.reason)), "
                    + (disable.witnessed ? "witnessed" : "unwitnessed") + "; FCM said: " + Printable.escaped(disable.lastError ?? "-") + "; "
                    + (disable.restoredAt.map { "restored at \(CommandValues.timestamp($0))" } ?? "not restored"))
            } else {
                lines.append("  last disable: never disabled by the worker" + (device.enabled ? "" : " (switched off by the app or the API)"))
            }
            if device.speaksForToken {
                lines.append("  token:        this registration speaks for the phone")
            } else {
                let newest = device.newest
                lines.append("  token:        superseded: device \(Printable.escaped(newest?.deviceId ?? "?")) of \(Printable.escaped(newest?.ownerId ?? "?")), "
                    + "last seen \(newest?.lastSeenAt.map(CommandValues.timestamp) ?? "-")" + (newest?.enabled == false ? ", pushes switched off there" : "")
                    + "; this one gets no push")
            }
            return lines
        }
    }

    struct OwnerReport: CommandReport {
        var owner: String
        var registrations: [Registration]

        var text: String {
            let header = "caregiver \(Printable.escaped(owner)): \(registrations.count) registration(s)"
            return ([header] + registrations.flatMap(\.lines)).joined(separator: "\n")
        }

        var json: JSONValue { .object(["ownerId": .string(owner), "devices": .array(registrations.map(\.json))]) }
    }

    /// The newest SENT delivery of each device.
    static func lastSentQuery(devices: [String]) -> PostgresQuery {
        """
        SELECT DISTINCT ON (pd."pushDeviceId") pd."pushDeviceId" AS device_id, pd."sentAt" AS sent_at, pd."eventKey" AS event_key, pd.id
        FROM "PushDelivery" pd WHERE pd."pushDeviceId" = ANY(\(devices)::text[]) AND pd.status = \(literal: DeliveryStatus.sent)
        ORDER BY pd."pushDeviceId", pd."sentAt" DESC NULLS LAST, pd."createdAt" DESC
        """
    }

    static func ownerReport(_ owner: String, _ connection: PostgresConnection) throws -> OwnerReport {
        let devices = try connection.query(#"""
            \#(sql: EventsCommand.Device.query) WHERE d."ownerType" = \#(literal: OwnerType.caregiver) AND d."ownerId" = \#(owner) ORDER BY d."lastSeenAt" DESC NULLS LAST, d.id
            """#).map(EventsCommand.Device.init)
        if devices.isEmpty, try !connection.query(EventsCommand.existsQuery(.caregiver(owner)))[0]["found"].bool() {
            throw CommandFailure("no caregiver has id \(Printable.escaped(owner)) (no link and no registered device)", details: ["ownerId": .string(owner)])
        }
        let ids = devices.map(\.id)
        var sent: [String: (at: Date?, eventKey: String, deliveryId: String)] = [:]
        for row in try connection.query(Self.lastSentQuery(devices: ids)) {
            sent[try row["device_id"].string()] = (try row["sent_at"].optionalDate(), try row["event_key"].string(), try row["id"].string())
        }
        var disables: [String: EventsCommand.LedgerDisable] = [:]
        for row in try connection.query(#"""
            \#(sql: EventsCommand.LedgerDisable.query) WHERE "pushDeviceId" = ANY(\#(ids)::text[]) ORDER BY "disabledAt"
            """#) {
            let disable = try EventsCommand.LedgerDisable(row)
            disables[disable.deviceId] = disable  // ordered: the last one stays
        }
        return OwnerReport(owner: owner, registrations: devices.map { Registration(device: $0, lastSent: sent[$0.id], lastDisable: disables[$0.id]) })
    }
}
