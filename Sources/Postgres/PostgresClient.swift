import Dispatch
import Foundation
import Synchronization
import Timekeeping

/// A small pool of libpq connections for async callers. Each connection lives on its own
/// serial `DispatchQueue`, so blocking libpq calls never run on Swift's cooperative pool.
/// A connection that broke is dropped; the next call reconnects, waiting a capped,
/// doubling backoff after consecutive failures.
public final class PostgresClient: Sendable {
    /// The conninfo string or URI this client connects with.
    public let conninfo: String
    /// Settings applied to every transaction this client runs (`withTransaction`, and `query` when not empty).
    public let settings: TransactionSettings
    private let slots: [Slot]
    private let gate: SlotGate

    /// Creates the pool; connections open lazily on first use.
    public init(conninfo: String, maxConnections: Int = 4, settings: TransactionSettings = .none) {
        self.conninfo = conninfo
        self.settings = settings
        self.slots = (0..<max(1, maxConnections)).map { Slot(index: $0) }
        self.gate = SlotGate(count: max(1, maxConnections))
    }

    /// Runs `body` with a connection from the pool, on that connection's queue.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let index = await gate.acquire()
        defer { gate.release(index) }
        let slot = slots[index]
        let conninfo = self.conninfo
        return try await withCheckedThrowingContinuation { continuation in
            slot.queue.async {
                continuation.resume(with: Result { try slot.run(conninfo: conninfo, body) })
            }
        }
    }

    /// Runs `body` in a transaction with the client's settings that commits when it returns and
    /// rolls back when it throws.
    @discardableResult
    public func withTransaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let settings = self.settings
        return try await withConnection { connection in try connection.withTransaction(settings: settings, body) }
    }

    /// Runs one parameterised statement (in its own transaction with the client's settings, if any).
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = []) async throws -> PostgresRows {
        if settings.isEmpty { return try await withConnection { connection in try connection.query(sql, parameters) } }
        return try await withTransaction { connection in try connection.query(sql, parameters) }
    }

    /// Closes every idle connection (they reopen on next use).
    public func close() async {
        for slot in slots {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                slot.queue.async { slot.drop(); continuation.resume() }
            }
        }
    }
}

/// One pooled connection and its queue.
///
/// `@unchecked Sendable` by a documented invariant: the libpq connection (a C handle) and the
/// failure count are touched only on `queue` (`run` asserts it; `drop` is dispatched there).
private final class Slot: @unchecked Sendable {
    let queue: DispatchQueue
    private var connection: PostgresConnection?
    private var failures = 0

    init(index: Int) {
        queue = DispatchQueue(label: "postgres.connection.\(index)")
    }

    func run<T>(conninfo: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        dispatchPrecondition(condition: .onQueue(queue))
        let active = try connect(conninfo: conninfo)
        do {
            return try body(active)
        } catch let error as PostgresError where error.isConnectionError || !active.isHealthy {
            drop()
            throw error
        } catch {
            if !active.isHealthy { drop() }
            throw error
        }
    }

    func drop() { connection = nil }

    static let reconnectBackoff = Backoff(base: .milliseconds(50), cap: .seconds(2))

    private func connect(conninfo: String) throws(PostgresError) -> PostgresConnection {
        if let connection, connection.isHealthy { return connection }
        connection = nil
        if failures > 0 {
            // Capped exponential backoff between reconnect attempts: 50 ms, 100 ms, … 2 s.
            Thread.sleep(forTimeInterval: Self.reconnectBackoff.delay(afterAttempt: failures, jitter: 1).asSeconds)
        }
        do {
            let opened = try PostgresConnection(conninfo: conninfo)
            connection = opened
            failures = 0
            return opened
        } catch {
            failures += 1
            throw error
        }
    }
}

/// Hands out slot indexes; callers beyond the pool size wait in FIFO order.
private final class SlotGate: Sendable {
    private struct State {
        var free: [Int]
        var waiters: [CheckedContinuation<Int, Never>] = []
    }

    private let state: Mutex<State>

    init(count: Int) { state = Mutex(State(free: Array((0..<count).reversed()))) }

    func acquire() async -> Int {
        await withCheckedContinuation { continuation in
            let index = state.withLock { state -> Int? in
                if let index = state.free.popLast() { return index }
                state.waiters.append(continuation)
                return nil
            }
            if let index { continuation.resume(returning: index) }
        }
    }

    func release(_ index: Int) {
        let next = state.withLock { state -> CheckedContinuation<Int, Never>? in
            guard !state.waiters.isEmpty else {
                state.free.append(index)
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume(returning: index)
    }
}
