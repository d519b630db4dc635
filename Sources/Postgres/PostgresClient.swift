import CLibPQ
import Dispatch
import FoundationEssentials
import Glibc
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
    /// A call that has not returned after this long is ended from our side (its socket shut down),
    /// nil for no limit. `statement_timeout` is enforced by the server, so a server that stopped
    /// answering (frozen, storage hung) never enforces it; TCP keepalives do not help either while
    /// its kernel still acknowledges. This bounds what such a server costs every loop.
    public let queryDeadline: Duration?
    private let slots: [Slot]
    private let gate: SlotGate

    /// Creates the pool; connections open lazily on first use.
    public init(conninfo: String, maxConnections: Int = 4, settings: TransactionSettings = .none, queryDeadline: Duration? = nil) {
        self.conninfo = conninfo
        self.settings = settings
        self.queryDeadline = queryDeadline
        self.slots = (0..<max(1, maxConnections)).map { Slot(index: $0, deadline: queryDeadline) }
        self.gate = SlotGate(count: max(1, maxConnections))
        scheduleWatch()
    }

    /// Every quarter of the deadline (at most every second): end calls that have run past it.
    private func scheduleWatch() {
        guard let deadline = queryDeadline else { return }
        let every = min(1.0, max(0.05, Double(deadline.components.seconds) / 4 + Double(deadline.components.attoseconds) / 4e18))
        DispatchQueue.global().asyncAfter(deadline: .now() + every) { [weak self] in
            guard let self else { return }
            for slot in self.slots { slot.abortIfOverdue() }
            self.scheduleWatch()
        }
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

    /// Runs independent statements in one transaction with the client's settings (or `settings`), in one round trip
    /// (`PostgresConnection.pipelinedTransaction`); returns each statement's rows.
    @discardableResult
    public func pipelinedTransaction(_ queries: [PostgresQuery], settings: TransactionSettings? = nil) async throws -> [PostgresRows] {
        let settings = settings ?? self.settings
        return try await withConnection { connection in try connection.pipelinedTransaction(settings: settings, queries) }
    }

    /// Runs `body` in a transaction with the client's settings (or `settings`) that commits when it returns and
    /// rolls back when it throws.
    @discardableResult
    public func withTransaction<T: Sendable>(settings: TransactionSettings? = nil,
                                             _ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let settings = settings ?? self.settings
        return try await withConnection { connection in try connection.withTransaction(settings: settings, body) }
    }

    /// Runs one statement, its interpolated values bound (in its own transaction with the client's settings, if any:
    /// one round trip all the same, as a pipeline).
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        if settings.isEmpty { return try await withConnection { connection in try connection.query(query) } }
        let settings = self.settings
        return try await withConnection { connection in try connection.pipelinedTransaction(settings: settings, [query])[0] }
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
/// failure count are touched only on `queue` (`run` asserts it; `drop` is dispatched there);
/// `watch` (the call in progress, read by the deadline timer) is behind its mutex.
private final class Slot: @unchecked Sendable {
    let queue: DispatchQueue
    private var connection: PostgresConnection?
    private var failures = 0
    private let deadline: Duration?
    private struct Watch {
        var since: ContinuousClock.Instant
        var socket: Int32
        var aborted = false
    }
    private let watch = Mutex<Watch?>(nil)

    init(index: Int, deadline: Duration?) {
        queue = DispatchQueue(label: "postgres.connection.\(index)")
        self.deadline = deadline
    }

    func run<T>(conninfo: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        dispatchPrecondition(condition: .onQueue(queue))
        let active = try connect(conninfo: conninfo)
        if deadline != nil { watch.withLock { $0 = Watch(since: .now, socket: active.socket) } }
        defer { if deadline != nil { watch.withLock { $0 = nil } } }
        do {
            return try body(active)
        } catch let error as PostgresError where error.isConnectionError || !active.isHealthy {
            drop()
            if let deadline, watch.withLock({ $0?.aborted == true }) {
                throw PostgresError(.connectionLost, message: "no answer from the server within \(deadline); connection closed by the worker",
                                    statement: error.statement)
            }
            throw error
        } catch {
            if !active.isHealthy { drop() }
            throw error
        }
    }

    /// Shuts down the socket of a call running past the deadline (called from the watch timer): libpq's
    /// blocked read returns at once, the call fails as a lost connection and the slot reconnects.
    func abortIfOverdue() {
        guard let deadline else { return }
        watch.withLock { current in
            guard var call = current, !call.aborted, ContinuousClock.now - call.since > deadline else { return }
            call.aborted = true
            current = call
            _ = shutdown(call.socket, Int32(SHUT_RDWR))
        }
    }

    func drop() { connection = nil }

    static let reconnectBackoff = Backoff(base: .milliseconds(50), cap: .seconds(2))

    private func connect(conninfo: String) throws(PostgresError) -> PostgresConnection {
        if let connection, connection.isHealthy { return connection }
        connection = nil
        if failures > 0 {
            // Capped exponential backoff between reconnect attempts: 50 ms, 100 ms, … 2 s.
            sleepThread(for: Self.reconnectBackoff.delay(afterAttempt: failures, jitter: 1))
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
