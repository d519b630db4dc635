import Outbox
import Postgres
import TextSupport

/// `event EVENT_KEY` for an event that has not settled: `"eventKey"` is written only when an event settles (DONE, or
/// DEAD after its attempts), so a PENDING, EXPIRED or DEAD-at-claim event is found by the key its payload gives, computed
/// the way the claim computes it (`DoseTakenEvent`).
extension EventCommand {
    /// The newest event whose key is `key`: written, else computed from the payload of an event without one.
    static func eventRows(key: String, _ connection: PostgresConnection) throws -> PostgresRows {
        let written = try connection.query(eventQuery(key: key))
        if !written.isEmpty { return written }
        let unsettled = try connection.query(unsettledCandidatesQuery(key: key))
        guard let match = unsettled.first(where: { (try? Event($0))?.computedKey == key }) else { return written }
        return try connection.query(eventQuery(id: Int64(match["id"].int())))
    }

    /// Events without a written key whose payload could give `key` (newest first): `doseTaken:{recordingGroupId}`, or
    /// `doseTaken:{patientId}:{date}:{slot}:{HH:mm}`. The caller computes each one's key to be sure.
    static func unsettledCandidatesQuery(key: String) -> PostgresQuery {
        let rest = key.hasPrefix("doseTaken:") ? String(key.dropFirst("doseTaken:".count)) : key
        // patientId:date:slot:HH:mm, from the right (a patient id may hold a colon).
        var parts = rest.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        var patient = "", date = "", slot = ""
        if parts.count >= 5 {
            parts.removeLast(2)
            slot = parts.removeLast()
            date = parts.removeLast()
            patient = parts.joined(separator: ":")
        }
        // One branch per unsettled status, so each reads that status's partial index, never the DONE bulk of the table.
        func branch(_ status: OutboxStatus) -> PostgresQuery {
            """
            SELECT \(sql: Event.columns) FROM "PushOutbox" o
            WHERE o.status = \(status.rawValue) AND o."eventKey" IS NULL
              AND (o.payload->>'recordingGroupId' = \(rest)
                   OR (o."patientId" = \(patient) AND o.payload->>'date' = \(date) AND o.payload->>'slot' = \(slot)))
            """
        }
        return "\(sql: branch(.pending)) UNION ALL \(sql: branch(.expired)) UNION ALL \(sql: branch(.dead)) ORDER BY id DESC LIMIT 100"
    }
}

extension EventCommand.Event {
    /// The key the claim gives this event (nil when its payload is not a valid DOSE_TAKEN event).
    var computedKey: String? {
        guard let payload else { return nil }
        return try? DoseTakenEvent.parse(eventType: eventType, patientId: patientId, payload: payload).eventKey
    }

    /// The text's `key:` line: the written key, else the computed one and why it is not written yet.
    var keyLine: String {
        if let eventKey { return Printable.escaped(eventKey) }
        if let computedKey { return "\(Printable.escaped(computedKey)) (computed from the payload; written when the event settles)" }
        return "(none: the payload is not a valid \(DoseTakenEvent.eventType) event)"
    }
}
