import Foundation
import JSON
import OperatorCommands
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
        try connection.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ($1, 'Hanako') ON CONFLICT DO NOTHING"#, [.text(patient)])
        try connection.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ($1, $2, $3, 'ACTIVE') ON CONFLICT DO NOTHING"#,
                             [.text("link-\(patient)-\(caregiver)"), .text(caregiver), .text(patient)])
        return try tokens.map { token in
            let id = "dev-" + UUID().uuidString.prefix(8).lowercased()
            try connection.query("""
                INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt", "createdAt", "updatedAt")
                VALUES ($1, 'CAREGIVER', $2, $3, 'ios', 'PROD', true, now() - interval '1 day', now(), now() - interval '1 day')
                """, [.text(id), .text(caregiver), .text(token)])
            return id
        }
    }

    /// An outbox event in `status`, created `hoursAgo`, with its key set (as a claim sets it) when `key` is given.
    func event(status: String, hoursAgo: Double, key: String? = nil, lastError: String? = nil, patient: String = "p1") throws -> Int64 {
        try Int64(connection.query("""
            INSERT INTO "PushOutbox" ("eventType", "patientId", payload, "createdAt", status, "eventKey", "lastError", "processedAt", attempts)
            VALUES ('DOSE_TAKEN', $1, '{"date":"2026-02-11","slot":"morning","withinTime":true,"isPrn":false,"takenAt":"2026-02-11T08:03:27+09:00","recordingGroupId":"g"}',
                    now() - make_interval(secs => $2::double precision), $3, $4, $5,
                    CASE WHEN $3 = 'PENDING' THEN NULL ELSE now() - interval '10 minutes' END, 3)
            RETURNING id
            """, [.text(patient), .double(hoursAgo * 3600), .text(status), key.map { .text($0) } ?? .null, lastError.map { .text($0) } ?? .null])[0]["id"].int())
    }

    /// A delivery of `key` to `device` in `status`.
    @discardableResult
    func delivery(_ id: String, key: String, device: String, status: String, lastError: String? = nil) throws -> String {
        try connection.query("""
            INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, attempts, "createdAt", "lastError", "sentAt", "fcmMessageId")
            VALUES ($1, $2, $3, $4, 1, now(), $5, CASE WHEN $4 = 'SENT' THEN now() END, CASE WHEN $4 = 'SENT' THEN 'projects/p/messages/1' END)
            """, [.text(id), .text(key), .text(device), .text(status), lastError.map { .text($0) } ?? .null])
        return id
    }

    func scalar(_ sql: String, _ parameters: [PostgresValue] = []) throws -> String? {
        try connection.query(sql, parameters).first?[0].optionalString()
    }
}
