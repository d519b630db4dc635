import FoundationEssentials

/// Severity of a log entry, in syslog order (swift-log's seven levels).
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case trace, debug, info, notice, warning, error, critical

    /// Parses the `LOG_LEVEL` spelling (`trace` … `critical`).
    public init?(name: String) {
        guard let level = LogLevel.allCases.first(where: { $0.name == name.lowercased() }) else { return nil }
        self = level
    }

    /// The lower-case name used in configuration and text output.
    public var name: String {
        switch self {
        case .trace: "trace"
        case .debug: "debug"
        case .info: "info"
        case .notice: "notice"
        case .warning: "warning"
        case .error: "error"
        case .critical: "critical"
        }
    }

    /// The syslog priority journald expects in `PRIORITY=`.
    public var syslogPriority: Int {
        switch self {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Structured metadata: dotted lower-case keys (`outbox.id`, `fcm.error`).
public typealias LogMetadata = [String: String]

/// One log entry as handed to a sink.
public struct LogEntry: Sendable {
    /// Component label, e.g. `outbox`.
    public var label: String
    public var level: LogLevel
    public var message: String
    public var metadata: LogMetadata
    public var date: Date

    public init(label: String, level: LogLevel, message: String, metadata: LogMetadata, date: Date) {
        self.label = label
        self.level = level
        self.message = message
        self.metadata = metadata
        self.date = date
    }
}

/// Where entries go: stderr text, the journal, or a test's memory.
public protocol LogSink: Sendable {
    func write(_ entry: LogEntry)
}

/// A value-type logger in swift-log's shape: a label, a minimum level, metadata.
/// Components receive one; they never make their own.
public struct Logger: Sendable {
    public var label: String
    public var logLevel: LogLevel
    public var metadata: LogMetadata
    private let sink: any LogSink

    public init(label: String, logLevel: LogLevel = .info, metadata: LogMetadata = [:], sink: any LogSink) {
        self.label = label
        self.logLevel = logLevel
        self.metadata = metadata
        self.sink = sink
    }

    /// A logger with the same sink and level under another label.
    public func child(label: String, metadata extra: LogMetadata = [:]) -> Logger {
        var copy = self
        copy.label = label
        copy.metadata.merge(extra) { _, new in new }
        return copy
    }

    /// Subscript access to one metadata key, as in swift-log.
    public subscript(metadataKey key: String) -> String? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, metadata extra: @autoclosure () -> LogMetadata = [:]) {
        guard level >= logLevel else { return }
        var merged = metadata
        let more = extra()
        if !more.isEmpty { merged.merge(more) { _, new in new } }
        sink.write(LogEntry(label: label, level: level, message: message(), metadata: merged, date: Date()))
    }

    public func trace(_ message: @autoclosure () -> String, metadata: @autoclosure () -> LogMetadata = [:]) { log(.trace, message(), metadata: metadata()) }
    public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> LogMetadata = [:]) { log(.debug, message(), metadata: metadata()) }
    public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> LogMetadata = [:]) { log(.info, message(), metadata: metadata()) }
    public func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> LogMetadata = [:]) { log(.notice, message(), metadata: metadata()) }
    public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> LogMetadata = [:]) { log(.warning, message(), metadata: metadata()) }
    public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> LogMetadata = [:]) { log(.error, message(), metadata: metadata()) }
    public func critical(_ message: @autoclosure () -> String, metadata: @autoclosure () -> LogMetadata = [:]) { log(.critical, message(), metadata: metadata()) }
}

/// Shortens secrets that must be identifiable but never printed whole (device tokens).
public enum Redact {
    /// First 6 and last 4 characters of a token; shorter values are fully masked.
    public static func token(_ value: String) -> String {
        guard value.count > 16 else { return "***" }
        return "\(value.prefix(6))…\(value.suffix(4))"
    }
}
