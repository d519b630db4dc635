import Foundation
import Postgres
import Schema

/// Isolated databases for integration tests. The admin connection comes from
/// `TEST_DATABASE_URL` (scripts/test sets it); each test gets a fresh database, dropped on
/// every exit path.
public enum TestDatabase {
    /// The admin conninfo, or a failure that says how to provide it.
    public static func adminConninfo() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["TEST_DATABASE_URL"], !url.isEmpty else {
            throw TestSupportError("TEST_DATABASE_URL is not set: run the suite through scripts/test")
        }
        return url
    }

    /// Runs `body` with the conninfo of a new, empty database.
    public static func withEmptyDatabase<T>(_ body: (String) async throws -> T) async throws -> T {
        let admin = try adminConninfo()
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        try runAdmin(admin, "CREATE DATABASE \(name)")
        let conninfo = admin + " dbname=\(name)"
        do {
            let value = try await body(conninfo)
            try? runAdmin(admin, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            return value
        } catch {
            try? runAdmin(admin, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            throw error
        }
    }

    /// Runs `body` with a new database holding the API's tables (SPEC §2.1) and the worker's migrations.
    public static func withMigratedDatabase<T>(_ body: (String) async throws -> T) async throws -> T {
        try await withEmptyDatabase { conninfo in
            let connection = try PostgresConnection(conninfo: conninfo)
            try createAPITables(connection)
            _ = try Migrator.migrate(connection)
            return try await body(conninfo)
        }
    }

    /// Creates the web API's tables as its Prisma schema does (SPEC §2.1).
    public static func createAPITables(_ connection: PostgresConnection) throws {
        for statement in apiTables { try connection.query(statement) }
    }

    static let apiTables = [
        """
        CREATE TABLE "Patient" (id text PRIMARY KEY, "displayName" text NOT NULL,
            "createdAt" timestamptz NOT NULL DEFAULT now(), "updatedAt" timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE TABLE "CaregiverPatientLink" (id text PRIMARY KEY, "caregiverId" text NOT NULL, "patientId" text NOT NULL,
            status text NOT NULL, "createdAt" timestamptz NOT NULL DEFAULT now(), "updatedAt" timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE TABLE "PushDevice" (id text PRIMARY KEY, "ownerType" text NOT NULL, "ownerId" text NOT NULL, token text NOT NULL,
            platform text NOT NULL DEFAULT 'ios', environment text NOT NULL DEFAULT 'PROD', "isEnabled" boolean NOT NULL DEFAULT true,
            "lastSeenAt" timestamptz NOT NULL DEFAULT now(), "createdAt" timestamptz NOT NULL DEFAULT now(),
            "updatedAt" timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE UNIQUE INDEX "PushDevice_ownerType_ownerId_token_key" ON "PushDevice" ("ownerType", "ownerId", token)
        """,
        """
        CREATE TABLE "PushDelivery" (id text PRIMARY KEY, "eventKey" text NOT NULL,
            "pushDeviceId" text NOT NULL REFERENCES "PushDevice"(id) ON DELETE CASCADE,
            "createdAt" timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE UNIQUE INDEX "PushDelivery_eventKey_pushDeviceId_key" ON "PushDelivery" ("eventKey", "pushDeviceId")
        """,
        """
        CREATE TABLE "CaregiverEntitlement" (id text PRIMARY KEY, "caregiverId" text NOT NULL, "productId" text NOT NULL,
            "originalTransactionId" text NOT NULL, "transactionId" text NOT NULL, environment text NOT NULL, status text NOT NULL,
            "purchasedAt" timestamptz NOT NULL, "createdAt" timestamptz NOT NULL DEFAULT now(),
            "updatedAt" timestamptz NOT NULL DEFAULT now())
        """,
        """
        CREATE UNIQUE INDEX "CaregiverEntitlement_originalTransactionId_key" ON "CaregiverEntitlement" ("originalTransactionId")
        """,
    ]

    private static func runAdmin(_ admin: String, _ sql: String) throws {
        let connection = try PostgresConnection(conninfo: admin)
        try connection.query(sql)
    }
}

/// A failure inside the test helpers.
public struct TestSupportError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
