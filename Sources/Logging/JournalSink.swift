import Systemd
import TextSupport

/// Writes native journal entries: `MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER`, `LOGGER`, and
/// each metadata key upper-cased with dots as underscores (`fcm.error` → `FCM_ERROR`), so
/// `journalctl -u medication-worker FCM_ERROR=UNREGISTERED` works. Every value is `Printable.escaped`: the journal
/// would keep an ESC or a carriage return as it is, and `journalctl` shows it to the reader's terminal.
public struct JournalSink: LogSink {
    public init() {}

    public func write(_ entry: LogEntry) {
        Journal.send(fields: Self.fields(for: entry))
    }

    /// The journal fields of an entry (pure; tested without a journal).
    public static func fields(for entry: LogEntry) -> [(String, String)] {
        var fields: [(String, String)] = [
            ("MESSAGE", Printable.escaped(entry.message)),
            ("PRIORITY", String(entry.level.syslogPriority)),
            ("SYSLOG_IDENTIFIER", "medication-worker"),
            ("LOGGER", Printable.escaped(entry.label)),
        ]
        for key in entry.metadata.keys.sorted() {
            fields.append((fieldName(key), Printable.escaped(entry.metadata[key] ?? "")))
        }
        return fields
    }

    /// `fcm.error` → `FCM_ERROR`; journal field names are A–Z, 0–9 and `_`, not starting with `_` or a digit.
    public static func fieldName(_ key: String) -> String {
        var name = String(key.uppercased().map { ($0.isASCII && ($0.isLetter || $0.isNumber)) ? $0 : "_" })
        while name.hasPrefix("_") { name.removeFirst() }
        if name.first?.isNumber ?? true { name = "F_" + name }
        return name
    }
}

/// Chooses the sink for the process.
public enum LogSinks {
    /// The journal when stderr is connected to it (running under systemd), otherwise key=value text on stderr.
    public static func automatic() -> any LogSink {
        Journal.stderrIsJournal ? JournalSink() : TextSink()
    }
}
