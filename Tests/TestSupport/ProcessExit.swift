import Foundation
import Synchronization

/// A started child process's exit, awaited without holding a thread: `terminationHandler` resumes the waiters.
/// (`Process.waitUntilExit` blocks its thread, a cooperative one when called from an async test.)
public final class ProcessExit: Sendable {
    private struct State {
        var status: Int32?
        var waiters: [CheckedContinuation<Int32, Never>] = []
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

    /// Whether the process has ended.
    public var hasExited: Bool { state.withLock { $0.status != nil } }

    fileprivate func exited(_ status: Int32) {
        let waiters = state.withLock { state in
            state.status = status
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume(returning: status) }
    }
}

extension Process {
    /// `run()`, with the exit to await.
    public func start() throws -> ProcessExit {
        let exit = ProcessExit()
        terminationHandler = { exit.exited($0.terminationStatus) }
        try run()
        return exit
    }

    /// `run()`, and waits for the exit.
    public func runToExit() async throws -> Int32 {
        try await start().wait()
    }
}
