import FoundationEssentials
import Glibc
import TextSupport

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
    /// A one-dimensional array of double precision with NULL elements (use `$1::double precision[]`).
    case optionalDoubleArray([Double?])
    /// A one-dimensional array of timestamps (use `$1::timestamptz[]`).
    case timestampArray([Date])

    /// The text-format wire representation as NUL-terminated UTF-8 (what libpq reads); nil for SQL NULL.
    /// Built over bytes: array literals quote every element, escaping only `"` and `\`.
    var wireBytes: [UInt8]? {
        var out: [UInt8] = []
        switch self {
        case .null: return nil
        case .text(let value): out.append(contentsOf: value.utf8)
        case .int(let value): out.append(contentsOf: String(value).utf8)
        case .double(let value): out.append(contentsOf: String(value).utf8)
        case .bool(let value): out.append(value ? UInt8(ascii: "t") : UInt8(ascii: "f"))
        case .timestamp(let date): out.append(contentsOf: PostgresValue.formatTimestamp(date).utf8)
        case .textArray(let values):
            out.reserveCapacity(values.reduce(2) { $0 + $1.utf8.count + 3 })
            Self.array(values, into: &out) { Self.appendQuoted($0, to: &$1) }
        case .intArray(let values):
            Self.array(values, into: &out) { $1.append(contentsOf: String($0).utf8) }
        case .optionalTextArray(let values):
            Self.array(values, into: &out) { value, out in
                if let value { Self.appendQuoted(value, to: &out) } else { out.append(contentsOf: "NULL".utf8) }
            }
        case .doubleArray(let values):
            Self.array(values, into: &out) { $1.append(contentsOf: String($0).utf8) }
        case .optionalDoubleArray(let values):
            Self.array(values, into: &out) { value, out in
                if let value { out.append(contentsOf: String(value).utf8) } else { out.append(contentsOf: "NULL".utf8) }
            }
        case .timestampArray(let values):
            Self.array(values, into: &out) { Self.appendQuoted(PostgresValue.formatTimestamp($0), to: &$1) }
        }
        out.append(0)
        return out
    }

    private static func array<T>(_ values: [T], into out: inout [UInt8], _ element: (T, inout [UInt8]) -> Void) {
        out.append(UInt8(ascii: "{"))
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            element(value, &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    private static func appendQuoted(_ value: String, to out: inout [UInt8]) {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        out.append(quote)
        var value = value
        value.withUTF8 { bytes in
            guard let base = bytes.baseAddress,
                  memchr(base, Int32(quote), bytes.count) != nil || memchr(base, Int32(backslash), bytes.count) != nil else {
                // Nothing to escape (ids, tokens, keys: nearly every value): copied whole.
                out.append(contentsOf: bytes)
                return
            }
            // Runs between the quotes and backslashes are copied whole; each of those gets a backslash before it.
            var runStart = 0
            for index in bytes.indices where bytes[index] == quote || bytes[index] == backslash {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                out.append(backslash)
                runStart = index
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
        out.append(quote)
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
        return "\((Int(tm.tm_year) + 1900).zeroPadded(4))-\((Int(tm.tm_mon) + 1).zeroPadded(2))-\(Int(tm.tm_mday).zeroPadded(2)) "
            + "\(Int(tm.tm_hour).zeroPadded(2)):\(Int(tm.tm_min).zeroPadded(2)):\(Int(tm.tm_sec).zeroPadded(2)).\(micros.zeroPadded(6))+00"
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
