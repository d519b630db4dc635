import FoundationEssentials
import Glibc
import Synchronization
import TextSupport

/// One `key=value` line per entry on stderr, for terminals and non-journal supervisors.
public struct TextSink: LogSink {
    /// One line at a time on stderr, whichever sink value writes it.
    private static let lock = Mutex(())

    public init() {}

    public func write(_ entry: LogEntry) {
        let line = TextSink.format(entry) + "\n"
        Self.lock.withLock { _ in StandardStreams.writeAll(line, to: STDERR_FILENO) }
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

    /// A value as logfmt writes it: bare when it is plain, else in double quotes with `\` and `"` backslashed and
    /// every control character escaped by `Printable.escaped` (`\n`, `\r`, `\u{1B}`), so a value from a client or a
    /// peer can neither end the line nor drive the reader's terminal.
    static func quote(_ value: String) -> String {
        // By scalars: a combining mark after a quote makes one Character of them, and must not hide the quote.
        let needsQuotes = value.isEmpty || value.unicodeScalars.contains { $0 == " " || $0 == "=" || $0 == "\"" || $0 == "\\" }
            || Printable.needsEscaping(value)
        guard needsQuotes else { return value }
        // Backslashes first, so an escape `Printable` writes stays distinguishable from the same text in the value.
        var body = String.UnicodeScalarView()
        for scalar in value.unicodeScalars {
            if scalar == "\\" || scalar == "\"" { body.append("\\") }
            body.append(scalar)
        }
        return "\"" + Printable.escaped(String(body)) + "\""
    }

    static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
    }
}
