import Logging
import Synchronization

/// Keeps entries in memory; tests read them back.
public final class MemorySink: LogSink, Sendable {
    private let stored = Mutex<[LogEntry]>([])

    public init() {}

    public func write(_ entry: LogEntry) { stored.withLock { $0.append(entry) } }

    /// Every entry written so far.
    public var entries: [LogEntry] { stored.withLock { $0 } }
}
