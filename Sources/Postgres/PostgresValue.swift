import Foundation

/// A bound statement parameter, sent in text format with the server inferring its type
/// from the statement (add casts such as `$1::jsonb` where the SQL needs them).
public enum PostgresValue: Sendable, Hashable {
    case null
    case text(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)
    /// A timestamp, sent as ISO-8601 UTC with microseconds.
    case timestamp(Date)
    /// A one-dimensional array of text (use `$1::text[]`).
    case textArray([String])
    /// A one-dimensional array of bigint (use `$1::bigint[]`).
    case intArray([Int64])
    /// A one-dimensional array of text with NULL elements (use `$1::text[]`).
    case optionalTextArray([String?])
    /// A one-dimensional array of double precision (use `$1::double precision[]`).
    case doubleArray([Double])
    /// A one-dimensional array of timestamps (use `$1::timestamptz[]`).
    case timestampArray([Date])

    /// The text-format wire representation; nil for SQL NULL.
    public var wireText: String? {
        switch self {
        case .null: return nil
        case .text(let value): return value
        case .int(let value): return String(value)
        case .double(let value): return String(value)
        case .bool(let value): return value ? "t" : "f"
        case .timestamp(let date): return PostgresValue.formatTimestamp(date)
        case .textArray(let values):
            return "{" + values.map(PostgresValue.quoteArrayElement).joined(separator: ",") + "}"
        case .intArray(let values):
            return "{" + values.map(String.init).joined(separator: ",") + "}"
        case .optionalTextArray(let values):
            return "{" + values.map { $0.map(PostgresValue.quoteArrayElement) ?? "NULL" }.joined(separator: ",") + "}"
        case .doubleArray(let values):
            return "{" + values.map { String($0) }.joined(separator: ",") + "}"
        case .timestampArray(let values):
            return "{" + values.map { "\"\(PostgresValue.formatTimestamp($0))\"" }.joined(separator: ",") + "}"
        }
    }

    static func quoteArrayElement(_ value: String) -> String {
        let escaped = value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        return "\"\(escaped)\""
    }

    /// `yyyy-MM-dd HH:mm:ss.SSSSSS+00`, which PostgreSQL reads whatever its DateStyle.
    static func formatTimestamp(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        var whole = seconds.rounded(.down)
        var micros = Int(((seconds - whole) * 1_000_000).rounded())
        if micros == 1_000_000 { whole += 1; micros = 0 }
        var tm = tm()
        var t = time_t(whole)
        gmtime_r(&t, &tm)
        return String(format: "%04d-%02d-%02d %02d:%02d:%02d.%06d+00", Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1,
                      Int(tm.tm_mday), Int(tm.tm_hour), Int(tm.tm_min), Int(tm.tm_sec), micros)
    }
}

extension PostgresValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(nilLiteral: ()) { self = .null }
}

extension PostgresValue {
    /// `.text(value)` or `.null` when nil.
    public static func optional(_ value: String?) -> PostgresValue { value.map(PostgresValue.text) ?? .null }
    /// `.int(value)` from a Swift `Int`.
    public static func int(_ value: Int) -> PostgresValue { .int(Int64(value)) }
}
