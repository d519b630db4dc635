import FoundationEssentials
import Glibc
import Synchronization

/// One `key=value` line per entry on stderr, for terminals and non-journal supervisors.
public struct TextSink: LogSink {
    /// One line at a time on stderr, whichever sink value writes it.
    private static let lock = Mutex(())

    public init() {}

    public func write(_ entry: LogEntry) {
        var line = TextSink.format(entry) + "\n"
        Self.lock.withLock { _ in
            line.withUTF8 { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = Glibc.write(STDERR_FILENO, bytes.baseAddress! + offset, bytes.count - offset)
                    if written > 0 { offset += written } else if written < 0 && errno == EINTR { continue } else { return }
                }
            }
        }
    }

    /// Formats an entry: `ts=… level=… logger=… msg="…" key=value …`, keys sorted.
    public static func format(_ entry: LogEntry) -> String {
        var parts = [
            "ts=\(timestamp(entry.date))",
            "level=\(entry.level.name)",
            "logger=\(entry.label)",
            "msg=\(quote(entry.message))",
        ]
        for key in entry.metadata.keys.sorted() {
            parts.append("\(key)=\(quote(entry.metadata[key] ?? ""))")
        }
        return parts.joined(separator: " ")
    }

    static func quote(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.contains { $0 == " " || $0 == "=" || $0 == "\"" || $0.isNewline }
        guard needsQuotes else { return value }
        let escaped = value
            .replacing("\\", with: "\\\\")
            .replacing("\"", with: "\\\"")
            .replacing("\n", with: "\\n")
        return "\"\(escaped)\""
    }

    static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
    }
}
