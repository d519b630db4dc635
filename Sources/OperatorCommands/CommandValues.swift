import FoundationEssentials
import JSON
import Outbox
import TextSupport
import WorkerConfig

/// How the commands read and show values: durations, timestamps, masked tokens, JSON members.
public enum CommandValues {
    /// A duration as the settings take it (`30m`, `2h`, `7d`, `500ms`; a bare integer is seconds).
    public static func duration(_ text: String) -> Duration? {
        guard let value = ValueParsing.duration(text), value > .zero else { return nil }
        return value
    }

    /// `2026-11-26T02:11:36Z` (UTC, whole seconds): the same in the text and the JSON.
    public static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(timeZone: .gmt))
    }

    public static func timestamp(_ date: Date?) -> JSONValue { date.map { .string(timestamp($0)) } ?? .null }

    public static func text(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }

    public static func number(_ value: Int?) -> JSONValue { value.map { .number(Double($0)) } ?? .null }

    /// A duration for people: `45s`, `12m`, `3.5h`, `2.0d`.
    public static func age(_ seconds: Double?) -> String { seconds.map { DurationText.age(seconds: $0) } ?? "-" }

    static func oneDecimal(_ value: Double) -> String { DurationText.oneDecimal(value) }

    /// Rows as aligned columns under a header (two spaces between columns); every cell `Printable.escaped`, so a value
    /// from the database or the app's payload cannot break the table into another line.
    public static func table(_ header: [String], _ rows: [[String]]) -> String {
        let rows = rows.map { $0.map(Printable.escaped) }
        var widths = header.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count { widths[index] = max(widths[index], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                index == cells.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count)
            }.joined(separator: "  ")
        }
        return ([line(header)] + rows.map(line)).joined(separator: "\n")
    }

    /// A list of ids for a line of text: the first 20, each escaped (a device id is the client app's), then `…`.
    public static func idList<T>(_ ids: [T]) -> String {
        ids.prefix(20).map { Printable.escaped("\($0)") }.joined(separator: ", ") + (ids.count > 20 ? ", … (\(ids.count) in all)" : "")
    }
}
