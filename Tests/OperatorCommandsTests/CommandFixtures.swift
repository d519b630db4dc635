import Foundation
import JSON
import OperatorCommands
import Outbox
import Postgres
import TestSupport
import Testing

/// Runs a command the way the binary does (the same parse, run and rendering), against a test database.
struct CommandRig {
    let conninfo: String
    let connection: PostgresConnection
    var environment: [String: String] { ["DATABASE_URL": conninfo] }

    init(_ conninfo: String) throws {
        self.conninfo = conninfo
        connection = try PostgresConnection(conninfo: conninfo)
    }

    /// `medication-worker NAME ARGS…` with `extra` settings; what it printed and its status.
    func run(_ name: String, _ arguments: String..., extra: [String: String] = [:]) async throws -> CommandRunner.Result {
        guard let type = CommandRunner.command(named: name) else { throw TestSupportError("no command \(name)") }
        return await CommandRunner.execute(type, arguments: arguments, environment: environment.merging(extra) { $1 })
    }

    /// The same with `--json`, parsed (a test fails when the output is not one JSON document).
    func json(_ name: String, _ arguments: String..., extra: [String: String] = [:]) async throws -> (status: Int32, json: JSONValue) {
        guard let type = CommandRunner.command(named: name) else { throw TestSupportError("no command \(name)") }
        let result = await CommandRunner.execute(type, arguments: arguments + ["--json"], environment: environment.merging(extra) { $1 })
        guard let json = JSONValue.parse(result.output) else { throw TestSupportError("not JSON: \(result.output) \(result.errorOutput)") }
        return (result.status, json)
    }

    /// A patient with one ACTIVE caregiver link and a device per token; returns the device ids.
    @discardableResult
    func patient(_ patient: String = "p1", caregiver: String = "c1", tokens: [String]) throws -> [String] {
        try connection.query(#"INSERT INTO "Patient" (id, "displayName") VALUES (\#(patient), 'Hanako') ON CONFLICT DO NOTHING"#)
        let link = "link-\(patient)-\(caregiver)"
        try connection.query(#"""
            INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES (\#(link), \#(caregiver), \#(patient), \#(literal: LinkStatus.active)) ON CONFLICT DO NOTHING
            """#)
        return try tokens.map { token in
            let id = "dev-" + UUID().uuidString.prefix(8).lowercased()
            try connection.query("""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt", "createdAt", "updatedAt")
                VALUES (\(id), \(literal: OwnerType.caregiver), \(caregiver), \(token), 'ios', 'PROD', true, now() - interval '1 day', now(), now() - interval '1 day')
                """)
            return id
        }
    }

    /// An outbox event in `status`, created `hoursAgo`, with its key set (as a claim sets it) when `key` is given.
    func event(status: String, hoursAgo: Double, key: String? = nil, lastError: String? = nil, patient: String = "p1") throws -> Int64 {
        try Int64(connection.query("""
            INSERT INTO "PushOutbox" ("eventType", "patientId", payload, "createdAt", status, "eventKey", "lastError", "processedAt", attempts)
            VALUES ('DOSE_TAKEN', \(patient), '{"date":"2026-02-11","slot":"morning","withinTime":true,"isPrn":false,"takenAt":"2026-02-11T08:03:27+09:00","recordingGroupId":"g"}',
                    now() - make_interval(secs => \(hoursAgo * 3600)::double precision), \(status), \(key), \(lastError),
                    CASE WHEN \(status) = \(literal: OutboxStatus.pending) THEN NULL ELSE now() - interval '10 minutes' END, 3)
            RETURNING id
            """)[0]["id"].int())
    }

    /// A delivery of `key` to `device` in `status`.
    @discardableResult
    func delivery(_ id: String, key: String, device: String, status: String, lastError: String? = nil) throws -> String {
        try connection.query("""
            INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, attempts, "createdAt", "lastError", "sentAt", "fcmMessageId")
            VALUES (\(id), \(key), \(device), \(status), 1, now(), \(lastError), CASE WHEN \(status) = \(literal: DeliveryStatus.sent) THEN now() END,
                    CASE WHEN \(status) = \(literal: DeliveryStatus.sent) THEN 'projects/p/messages/1' END)
            """)
        return id
    }

    func scalar(_ query: PostgresQuery) throws -> String? {
        try connection.query(query).first?[0].optionalString()
    }
}
