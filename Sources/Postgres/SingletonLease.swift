import FoundationEssentials
import Glibc
import Timekeeping

/// A named lease row: how a loop runs on one instance at a time (retention, entitlement checks,
/// migrations, the status gauges) without session state.
///
/// A session advisory lock does not survive a transaction-mode pooler: its lock and unlock can
/// run on different server connections, and the pooler keeps the lock held on whichever
/// connection took it. A lease row is plain data: taken or renewed in one statement, it expires
/// on its own when its holder dies, and any instance can see who holds it.
public struct SingletonLease: Sendable {
    /// The table, created by `migrate` before any migration runs.
    public static let table = "_medication_worker_leases"

    /// Creates the table when missing (idempotent).
    public static let createTableSQL: PostgresQuery = """
        CREATE TABLE IF NOT EXISTS \(sql: tableSQL) (
            name text PRIMARY KEY,
            holder text NOT NULL,
            "expiresAt" timestamptz NOT NULL,
            state text,
            "stateAt" timestamptz
        )
        """

    /// The table's name as SQL (a constant, never a value).
    static let tableSQL: PostgresQuery = "\(unescaped: PostgresConnection.quoteIdentifier(table))"

    /// Takes lease `name` for `holder` for `duration`, or renews it: a row back when taken.
    static func acquireQuery(name: String, holder: String, duration: Duration) -> PostgresQuery {
        """
        INSERT INTO \(sql: tableSQL) AS l (name, holder, "expiresAt")
        VALUES (\(name), \(holder), now() + make_interval(secs => \(duration.asSeconds)::double precision))
        ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, "expiresAt" = EXCLUDED."expiresAt"
        WHERE l.holder = EXCLUDED.holder OR l."expiresAt" < now()
        RETURNING holder
        """
    }

    /// Extends `holder`'s lease `name`, only while no other holder has taken it since: a row back when renewed. Unlike
    /// `acquireQuery`, it does not take back a lease that lapsed and passed to another holder (who may have released it).
    static func renewQuery(name: String, holder: String, duration: Duration) -> PostgresQuery {
        """
        UPDATE \(sql: tableSQL) SET "expiresAt" = now() + make_interval(secs => \(duration.asSeconds)::double precision)
        WHERE name = \(name) AND holder = \(holder)
        RETURNING holder
        """
    }

    /// Ends `holder`'s lease `name` now.
    static func releaseQuery(name: String, holder: String) -> PostgresQuery {
        """
        UPDATE \(sql: tableSQL) SET "expiresAt" = '-infinity' WHERE name = \(name) AND holder = \(holder)
        """
    }

    /// Stores `state` beside `holder`'s lease `name`.
    static func publishQuery(name: String, holder: String, state: String) -> PostgresQuery {
        """
        UPDATE \(sql: tableSQL) SET state = \(state), "stateAt" = now() WHERE name = \(name) AND holder = \(holder)
        """
    }

    /// The state last published beside lease `name`, and its age in seconds.
    static func stateQuery(name: String) -> PostgresQuery {
        """
        SELECT state, extract(epoch FROM now() - "stateAt")::double precision AS age FROM \(sql: tableSQL) WHERE name = \(name)
        """
    }

    /// The loop's name, e.g. `retention`.
    public let name: String
    /// Who holds it: unique per process (and per use when a process runs two holders).
    public let holder: String
    /// How long a taken lease lasts without renewal; a dead holder's lease is free after this.
    public let duration: Duration

    public init(name: String, duration: Duration, holder: String = ProcessInfo.processInfo.hostName + ":\(getpid()):" + UUID().uuidString) {
        self.name = name
        self.duration = duration
        self.holder = holder
    }

    /// Takes the lease, or renews it when this holder has it. False when another holder's lease runs.
    public func acquire(_ connection: PostgresConnection) throws(PostgresError) -> Bool {
        !(try connection.query(Self.acquireQuery(name: name, holder: holder, duration: duration))).isEmpty
    }

    /// Extends the lease this holder took; false when another holder has taken it since (even one that has given it up
    /// again), so that work which must not overlap another holder's stops.
    public func renew(_ connection: PostgresConnection) throws(PostgresError) -> Bool {
        !(try connection.query(Self.renewQuery(name: name, holder: holder, duration: duration))).isEmpty
    }

    /// Gives the lease up at once (no-op when this holder does not have it).
    public func release(_ connection: PostgresConnection) throws(PostgresError) {
        try connection.query(Self.releaseQuery(name: name, holder: holder))
    }

    /// Stores a small result (e.g. JSON) beside the lease for the other instances to read.
    public func publish(_ state: String, on connection: PostgresConnection) throws(PostgresError) {
        try connection.query(Self.publishQuery(name: name, holder: holder, state: state))
    }

    /// The last published state of `name` and its age in seconds, nil when none was published.
    public static func state(of name: String, on connection: PostgresConnection) throws(PostgresError) -> (state: String, ageSeconds: Double)? {
        guard let row = try connection.query(stateQuery(name: name)).first, let state = row["state"].optionalString() else { return nil }
        return (state, row["age"].optionalString().flatMap(Double.init) ?? 0)
    }

    /// Async forms on a pooled client (each one statement, one round trip).
    public func acquire(on client: PostgresClient) async throws -> Bool {
        let lease = self
        return try await client.withConnection { try lease.acquire($0) }
    }

    public func release(on client: PostgresClient) async throws {
        let lease = self
        try await client.withConnection { try lease.release($0) }
    }

    /// The one way a loop holds the lease: runs `body` only while this holder has it, and returns its result; nil
    /// when another holder's lease runs (nothing ran). While `body` runs, the lease is renewed every third of its
    /// duration; a renewal that finds it taken over cancels `body` and throws `LeaseLost`. `releasing`: give it up
    /// when `body` ends (a one-off job), or keep it until it expires or `release` (a loop that runs again soon, so the
    /// same instance keeps the job).
    public func whileHeld<T: Sendable>(on client: PostgresClient, releasing: Bool = true,
                                       _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        guard try await acquire(on: client) else { return nil }
        let lease = self
        let outcome: Result<T?, any Error>
        do {
            outcome = .success(try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask { try await body() }
                group.addTask {
                    while true {
                        try await Task.sleep(for: lease.duration / 3)
                        guard try await lease.acquire(on: client) else { throw LeaseLost(name: lease.name) }
                    }
                }
                defer { group.cancelAll() }
                while let value = try await group.next() {
                    if let value { return value }
                }
                return nil
            })
        } catch {
            outcome = .failure(error)
        }
        if releasing { try? await release(on: client) }
        return try outcome.get()
    }
}

/// The singleton lease was taken over (it expired while this instance could not renew it).
public struct LeaseLost: Error, CustomStringConvertible {
    public var name: String
    public var description: String { "lost the \(name) lease" }
}
