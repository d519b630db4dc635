import Foundation
import Outbox
import Postgres

/// The one seeding factory of the database tests: the API's tables (a patient, a link, a device) and events enqueued
/// exactly as the web API does.
public struct Fixtures {
    public let connection: PostgresConnection

    public init(_ conninfo: String) throws { connection = try PostgresConnection(conninfo: conninfo) }

    public func patient(_ id: String, name: String = "山田花子") throws {
        try connection.query(#"INSERT INTO "Patient" (id, "displayName") VALUES (\#(id), \#(name))"#)
    }

    public func link(caregiver: String, patient: String, status: LinkStatus = .active) throws {
        try connection.query(#"""
            INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES (\#(UUID().uuidString), \#(caregiver), \#(patient), \#(literal: status))
            """#)
    }

    @discardableResult
    public func device(owner: String, token: String, enabled: Bool = true, id: String = UUID().uuidString) throws -> String {
        try connection.query("""
            INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt")
            VALUES (\(id), \(literal: OwnerType.caregiver), \(owner), \(token), 'ios', 'PROD', \(enabled), now() - interval '1 day')
            """)
        return id
    }

    /// Patient `p1` with caregiver `c1` (ACTIVE link) and one enabled device per token.
    public func caredForPatient(tokens: [String]) throws {
        try patient("p1")
        try link(caregiver: "c1", patient: "p1")
        for token in tokens { try device(owner: "c1", token: token) }
    }

    /// The web API's documented enqueue statement.
    @discardableResult
    public func enqueue(patient: String, payload: String, eventType: String = "DOSE_TAKEN") throws -> Int64 {
        Int64(try connection.query(Self.enqueueQuery(patient: patient, payload: payload, eventType: eventType))[0]["id"].int())
    }

    /// The same statement, for a test with a client of its own (a daemon's database); it returns the event's `id`.
    public static func enqueueQuery(patient: String, payload: String, eventType: String = "DOSE_TAKEN") -> PostgresQuery {
        """
        INSERT INTO "PushOutbox" ("eventType", "patientId", payload) VALUES (\(eventType), \(patient), \(payload)::jsonb) RETURNING id
        """
    }

    /// A noon dose recorded late (`withinTime` false) in group `group`: the daemon tests' event.
    public static func noonPayload(group: String) -> String {
        payload(slot: "noon", group: group, withinTime: false, takenAt: "2026-02-11T12:00:00+09:00")
    }

    /// `patients` patients, each cared for by one caregiver with `devices` devices, and `events` DOSE_TAKEN events spread over them.
    public func caredForPatients(_ patients: Int, devicesEach devices: Int, events: Int) throws {
        try connection.query(#"INSERT INTO "Patient" (id, "displayName") SELECT 'p' || g, 'name' || g FROM generate_series(1, \#(patients)::int) g"#)
        try connection.query(#"""
            INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status)
            SELECT 'l' || g, 'c' || g, 'p' || g, \#(literal: LinkStatus.active) FROM generate_series(1, \#(patients)::int) g
            """#)
        try connection.query(#"""
            INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, "isEnabled", "lastSeenAt")
            SELECT 'd' || g || '-' || k, \#(literal: OwnerType.caregiver), 'c' || g, 'tok-' || g || '-' || k, true, now()
            FROM generate_series(1, \#(patients)::int) g, generate_series(1, \#(devices)::int) k
            """#)
        try connection.query(#"""
            INSERT INTO "PushOutbox" ("eventType", "patientId", payload)
            SELECT 'DOSE_TAKEN', 'p' || (1 + g % \#(patients)::int), jsonb_build_object('date', '2026-02-11', 'slot', 'morning',
                'recordingGroupId', 'group-' || g, 'withinTime', true, 'isPrn', false, 'takenAt', '2026-02-11T08:03:27+09:00')
            FROM generate_series(1, \#(events)::int) g
            """#)
    }

    public static func payload(date: String = "2026-02-11", slot: String = "morning", group: String? = "group-1",
                        withinTime: Bool = true, takenAt: String = "2026-02-11T08:03:27+09:00") -> String {
        let groupJSON = group.map { "\"\($0)\"" } ?? "null"
        return #"{"date":"\#(date)","slot":"\#(slot)","recordingGroupId":\#(groupJSON),"withinTime":\#(withinTime),"isPrn":false,"takenAt":"\#(takenAt)"}"#
    }

}
