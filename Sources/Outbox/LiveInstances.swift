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

    /// Serialises heartbeats that share a budget (transaction-scoped, so pooler-safe; `status`'s reads are not blocked):
    /// each one reads the shares that every heartbeat before it wrote.
    static let lockQuery: PostgresQuery = #"LOCK TABLE "_medication_worker_instances" IN SHARE ROW EXCLUSIVE MODE"#

    /// The live instances' shares of the budget (NULL: none written, an instance without a budget or of an older version).
    static func sharesQuery(liveWithin: Duration) -> PostgresQuery {
        """
        SELECT id::text AS id, "sendShare" AS share FROM "_medication_worker_instances"
        WHERE "heartbeatAt" > now() - make_interval(secs => \(liveWithin.asSeconds)::double precision)
        """
    }

    /// Records the share of the budget instance `id` may send at until its next heartbeat.
    static func setShareQuery(id: String, share: Double) -> PostgresQuery {
        #"UPDATE "_medication_worker_instances" SET "sendShare" = \#(share) WHERE id = \#(id)::uuid"#
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

    /// What a heartbeat learned.
    public struct Heartbeat: Sendable, Equatable {
        /// The live instances, this one included.
        public var live: Int
        /// This instance's sends per second until its next heartbeat (nil: no budget).
        public var share: Double?
        /// The share is below an even split: instances that have not yet seen this one still hold the rest.
        public var waiting: Bool
    }

    /// This instance's share of `budget`: an even split among the `live` instances, but never more than the others'
    /// recorded shares (`othersHold`) leave, since an instance that has not heartbeaten since this one registered still
    /// sends at the share it took without it. The shares recorded never add up to more than the budget.
    public static func share(of budget: Double, live: Int, othersHold: Double) -> Double {
        max(0, min(budget / Double(max(1, live)), budget - othersHold))
    }

    /// Registers or renews this instance's row and forgets long-gone ones. With a `budget` (the project's sends per
    /// second) it also takes this instance's share, serialised with the other instances' heartbeats and recorded in its
    /// row; a lower share is handed to `lowering` before it is committed (nobody may count on it before this
    /// instance slows down), a higher one is the caller's to apply once this returns.
    @discardableResult
    public func heartbeat(version: String, budget: Double? = nil,
                          lowering: @escaping @Sendable (Double) -> Void = { _ in }) async throws -> Heartbeat {
        let id = self.id
        return try await client.withTransaction { connection in
            if budget != nil { try connection.query(Self.lockQuery) }
            try connection.query(Self.heartbeatQuery(id: id, host: Self.hostName, pid: Int(getpid()), version: version))
            try connection.query(Self.forgetQuery(after: Self.forgetAfter))
            let rows = try connection.query(Self.sharesQuery(liveWithin: Self.liveWithin))
            let shares = try rows.map { row in (id: try row["id"].string(), share: row["share"].isNull ? nil : try row["share"].double()) }
            guard let budget else { return Heartbeat(live: shares.count, share: nil, waiting: false) }
            let even = budget / Double(max(1, shares.count))
            // An instance that recorded no share is counted at an even split.
            let othersHold = shares.filter { $0.id != id }.reduce(0) { $0 + ($1.share ?? even) }
            let share = Self.share(of: budget, live: shares.count, othersHold: othersHold)
            if let previous = shares.first(where: { $0.id == id })?.share, share < previous { lowering(share) }
            try connection.query(Self.setShareQuery(id: id, share: share))
            // (Within rounding: shares that add up to the budget leave the last one a hair below its split.)
            return Heartbeat(live: shares.count, share: share, waiting: share < even * (1 - 1e-9))
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
