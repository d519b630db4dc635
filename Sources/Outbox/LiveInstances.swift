import FoundationEssentials
import Glibc
import Postgres
import Timekeeping

/// The live `run` processes: each keeps a row in `"_medication_worker_instances"` with a heartbeat;
/// `status` lists them, and whatever the instances share (the FCM project's send budget) is split among them.
public struct LiveInstances: Sendable {
    /// One instance as `status` shows it.
    public struct Instance: Sendable, Equatable {
        public var id: String
        public var host: String
        public var pid: Int
        public var version: String
        public var startedAt: Date
        public var heartbeatAt: Date
    }

    /// How often an instance renews its row.
    public static let heartbeatInterval = Duration.seconds(10)
    /// A row not renewed for this long belongs to a process that is gone (killed, partitioned).
    public static let liveWithin = Duration.seconds(30)
    /// Rows of gone instances are deleted after this long (they are kept a while for `status`'s history).
    public static let forgetAfter = Duration.seconds(86_400)

    let client: PostgresClient
    /// This process's row id.
    public let id: String

    public init(client: PostgresClient, id: String = UUID().uuidString.lowercased()) {
        self.client = client
        self.id = id
    }

    /// Registers instance `id` (host, process id, version), or renews its heartbeat.
    static func heartbeatQuery(id: String, host: String, pid: Int, version: String) -> PostgresQuery {
        """
        INSERT INTO "_medication_worker_instances" AS i (id, host, pid, version)
        VALUES (\(id)::uuid, \(host), \(pid), \(version))
        ON CONFLICT (id) DO UPDATE SET "heartbeatAt" = now()
        """
    }

    /// Deletes the rows of instances silent for longer than `after`.
    static func forgetQuery(after: Duration) -> PostgresQuery {
        """
        DELETE FROM "_medication_worker_instances" WHERE "heartbeatAt" < now() - make_interval(secs => \(after.asSeconds)::double precision)
        """
    }

    /// Deletes instance `id`'s row.
    static func leaveQuery(id: String) -> PostgresQuery {
        #"DELETE FROM "_medication_worker_instances" WHERE id = \#(id)::uuid"#
    }

    /// The instances heard from within `liveWithin`, oldest first.
    static func listQuery(liveWithin: Duration) -> PostgresQuery {
        """
        SELECT id::text AS id, host, pid, version, "startedAt" AS started, "heartbeatAt" AS heartbeat
        FROM "_medication_worker_instances"
        WHERE "heartbeatAt" > now() - make_interval(secs => \(liveWithin.asSeconds)::double precision)
        ORDER BY "startedAt", id
        """
    }

    /// Registers or renews this instance's row, forgets long-gone ones; returns how many instances are live.
    @discardableResult
    public func heartbeat(version: String) async throws -> Int {
        let id = self.id
        return try await client.withTransaction { connection in
            try connection.query(Self.heartbeatQuery(id: id, host: Self.hostName, pid: Int(getpid()), version: version))
            try connection.query(Self.forgetQuery(after: Self.forgetAfter))
            return try Self.list(connection).count
        }
    }

    /// Deletes this instance's row (a clean stop), so the others take its share at once.
    public func leave() async throws {
        let id = self.id
        _ = try await client.withConnection { try $0.query(Self.leaveQuery(id: id)) }
    }

    /// The instances whose heartbeat is recent.
    public static func list(_ connection: PostgresConnection) throws -> [Instance] {
        try connection.query(listQuery(liveWithin: liveWithin)).map { row in
            Instance(id: try row["id"].string(), host: try row["host"].string(), pid: try row["pid"].int(),
                     version: try row["version"].string(), startedAt: try row["started"].date(), heartbeatAt: try row["heartbeat"].date())
        }
    }

    /// This machine's name (`gethostname`), for the instance row.
    public static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "unknown" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
