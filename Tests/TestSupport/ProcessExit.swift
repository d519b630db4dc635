import Foundation
import Synchronization

/// A started child process's exit, awaited without holding a thread: `terminationHandler` resumes the waiters.
/// (`Process.waitUntilExit` blocks its thread, a cooperative one when called from an async test.)
public final class ProcessExit: Sendable {
    private struct State {
        var status: Int32?
        var waiters: [CheckedContinuation<Int32, Never>] = []
        var blocked: [DispatchSemaphore] = []
    }

    private let state = Mutex(State())

    fileprivate init() {}

    /// The exit status (`terminationStatus`) once the process has ended.
    public func wait() async -> Int32 {
        await withCheckedContinuation { continuation in
            let status = state.withLock { state -> Int32? in
                if state.status == nil { state.waiters.append(continuation) }
                return state.status
            }
            if let status { continuation.resume(returning: status) }
        }
    }

    /// Blocks the calling thread until the exit: for a `defer` that must not let the test's fakes go while the process
    /// still talks to them. Only on `BlockingExecutor` (`.blockingFixtures`), never on the cooperative pool.
    public func waitBlocking() -> Int32 {
        let semaphore = DispatchSemaphore(value: 0)
        if let status = state.withLock({ state -> Int32? in
            if state.status == nil { state.blocked.append(semaphore) }
            return state.status
        }) { return status }
        semaphore.wait()
        return state.withLock { $0.status ?? -1 }
    }

    /// Whether the process has ended.
    public var hasExited: Bool { state.withLock { $0.status != nil } }

    fileprivate func exited(_ status: Int32) {
        let (waiters, blocked) = state.withLock { state in
            state.status = status
            defer { state.waiters = []; state.blocked = [] }
            return (state.waiters, state.blocked)
        }
        waiters.forEach { $0.resume(returning: status) }
        blocked.forEach { $0.signal() }
    }
}

extension Process {
    /// One launch at a time in this process: swift-corelibs-foundation's `run()` crashed (SIGSEGV in a memcpy inside
    /// it) when tests running side by side launched processes at the same moment.
    static let launching = Mutex(())

    /// `run()` under `launching`.
    public func runOneAtATime() throws {
        try Self.launching.withLock { _ in try run() }
    }

    /// `run()`, with the exit to await.
    public func start() throws -> ProcessExit {
        let exit = ProcessExit()
        terminationHandler = { exit.exited($0.terminationStatus) }
        try runOneAtATime()
        return exit
    }

    /// `run()`, and waits for the exit.
    public func runToExit() async throws -> Int32 {
        try await start().wait()
    }
}
