import Foundation
import Testing

/// A task executor of the tests' own threads, for fixtures that block: libpq calls, `PostgresListener.stop()`, reads of
/// a socket, servers started and stopped synchronously. Swift's cooperative pool has one thread per core (two here); a
/// few tests blocking on it at once stalled the whole parallel run. Code run under `offCooperativePool` (or the
/// `.blockingFixtures` trait) runs here instead (SE-0417). A job goes to an idle thread; with none idle, to one of the
/// first few threads, or else a monitor adds a thread when the line of jobs has not moved for 5 ms (as libdispatch's
/// workqueue monitor does): a blocked test never holds up another, and a burst of short jobs does not start a thread each.
public final class BlockingExecutor: TaskExecutor, @unchecked Sendable {
    public static let shared = BlockingExecutor()

    /// Threads started without waiting for the monitor.
    private static let eagerThreads = 4
    /// How long the line of jobs may stand still before the monitor adds a thread.
    private static let stallMicroseconds: UInt32 = 5_000

    /// Guards the fields below; idle threads wait on it.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    /// Index in `jobs` of the next job to run.
    private var next = 0
    /// Jobs taken so far (the monitor's measure of progress).
    private var taken = 0
    /// Threads waiting for a job and not yet signalled.
    private var idle = 0
    private var threads = 0
    private var monitoring = false

    private init() {}

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        var spawn = false, monitor = false
        if idle > 0 {
            idle -= 1
            condition.signal()
        } else if threads < Self.eagerThreads {
            threads += 1
            spawn = true
        } else if !monitoring {
            monitoring = true
            monitor = true
        }
        condition.unlock()
        if spawn { start("test-blocking") { [self] in work() } }
        if monitor { start("test-blocking-monitor") { [self] in watch() } }
    }

    private func start(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(block: body)
        thread.name = name
        thread.start()
    }

    private func work() {
        while true {
            condition.lock()
            while next == jobs.count {
                idle += 1
                condition.wait()
            }
            let job = jobs[next]
            next += 1
            taken += 1
            if next == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                next = 0
            }
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// Adds a thread whenever jobs wait, no thread is idle, and none was taken for `stallMicroseconds`.
    private func watch() {
        var lastTaken = -1
        while true {
            usleep(Self.stallMicroseconds)
            condition.lock()
            let stalled = next < jobs.count && idle == 0 && taken == lastTaken
            lastTaken = taken
            if stalled { threads += 1 }
            condition.unlock()
            if stalled { start("test-blocking") { [self] in work() } }
        }
    }
}

/// Runs `body` with its nonisolated async code, and the synchronous calls it makes, on `BlockingExecutor`'s threads:
/// for test code that blocks. Child tasks inherit the preference; unstructured `Task {}` does not.
public func offCooperativePool<T, Failure: Error>(
    isolation: isolated (any Actor)? = #isolation, _ body: () async throws(Failure) -> T
) async throws(Failure) -> T {
    try await withTaskExecutorPreference(BlockingExecutor.shared, isolation: isolation, operation: body)
}

/// `@Suite(.blockingFixtures)` / `@Test(.blockingFixtures)`: the tests run under `offCooperativePool`, for suites whose
/// fixtures block (synchronous libpq connections, servers started and stopped synchronously, threads joined).
public struct BlockingFixturesTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await offCooperativePool { try await function() }
    }
}

extension Trait where Self == BlockingFixturesTrait {
    public static var blockingFixtures: Self { Self() }
}
