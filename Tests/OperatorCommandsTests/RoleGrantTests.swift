import Postgres
@testable import OperatorCommands
import Outbox
import Testing
import TestSupport

/// `sql/roles.sql` grants columns where columns suffice (issue 54).
@Suite("sql/roles.sql column grants", .blockingFixtures)
struct RoleGrantTests {
    /// Column grants where they suffice (issue 54): the role reads a patient's id and name only, and writes a device's
    /// "isEnabled" and "updatedAt" only; the API's other columns are refused, and `check-config --online`'s privilege
    /// check agrees with the file.
    @Test func columnGrants_refuseWhatTheDaemonDoesNotUse() async throws {
        try await TestDatabase.withMigratedDatabase { owner in
            let admin = try PostgresConnection(conninfo: owner)
            try admin.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', 'name')"#)
            try admin.query(#"INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d1', \#(literal: OwnerType.caregiver), 'c1', 'token-1')"#)
            try await LeastPrivilegeRole.with(owner: owner) { worker in
                let role = try PostgresConnection(conninfo: worker)
                func refused(_ statement: PostgresQuery) -> Bool {
                    do { _ = try role.query(statement); return false } catch { return error.sqlState == "42501" }  // insufficient_privilege
                }
                #expect(refused(#"UPDATE "PushDevice" SET token = 'someone-else' WHERE id = 'd1'"#))
                #expect(refused(#"UPDATE "PushDevice" SET "ownerId" = 'c2' WHERE id = 'd1'"#))
                #expect(refused(#"UPDATE "PushDevice" SET "lastSeenAt" = now() WHERE id = 'd1'"#))
                #expect(refused(#"SELECT "createdAt" FROM "Patient""#))
                #expect(refused(#"SELECT * FROM "Patient""#))
                #expect(refused(#"UPDATE "Patient" SET "displayName" = 'x'"#))
                // What the daemon does use still works.
                #expect(try role.query(#"SELECT id, "displayName" FROM "Patient""#).count == 1)
                #expect(try role.query(#"UPDATE "PushDevice" SET "isEnabled" = false, "updatedAt" = now() WHERE id = 'd1' RETURNING id"#).count == 1)
                #expect(try role.query(#"SELECT token, "lastSeenAt", "createdAt" FROM "PushDevice""#).count == 1)
                let privileges = try role.query(OnlineChecks.privilegeQuery)
                #expect(try privileges.allSatisfy { try $0["granted"].bool() }, "check-config --online's check disagrees with sql/roles.sql")
            }
        }
    }

    /// `migrate` under the daemon's least-privilege role is a bad setting (exit 78, which the migrate unit does not
    /// retry), naming DATABASE_URL, the role it connects as and the owner it needs, in text and in `--json`.
    @Test func migrate_asTheLeastPrivilegeRole_isABadDatabaseURL_namingBothRoles() async throws {
        try await TestDatabase.withMigratedDatabase { owner in
            let ownerName = try PostgresConnection(conninfo: owner).query("SELECT current_user AS me").first?["me"].string() ?? "?"
            try await LeastPrivilegeRole.with(owner: owner) { worker in
                let role = String(worker.split(separator: "=").last ?? "")
                let rig = try CommandRig(worker)
                let text = try await rig.run("migrate")
                #expect(text.status == 78)
                #expect(text.output.isEmpty)
                #expect(text.errorOutput.contains("medication-worker: configuration error: DATABASE_URL: migrate must run as the owner of the tables it alters"), "\(text.errorOutput)")
                #expect(text.errorOutput.contains("connects as \"\(role)\""), "\(text.errorOutput)")
                #expect(text.errorOutput.contains("is owned by \"\(ownerName)\""), "\(text.errorOutput)")
                let json = try await rig.json("migrate")
                #expect(json.status == 78)
                #expect(json.json["error"]?["kind"] == .string("configuration"), "\(json.json)")
                #expect(json.json["error"]?["setting"] == .string("DATABASE_URL"), "\(json.json)")
                #expect(json.json["error"]?["exitStatus"] == .number(78), "\(json.json)")
            }
        }
    }
}
