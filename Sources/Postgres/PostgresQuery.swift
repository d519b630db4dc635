import FoundationEssentials

/// SQL and its parameters written as one interpolated string, as postgres-nio's `PostgresQuery`: `\(value)` binds a
/// parameter (`$n`), never pastes text, so no value can change a statement; `\(sql: fragment)` splices another query
/// (SQL composed only as SQL, its own parameters renumbered); `\(unescaped: text)` pastes SQL text built by the program
/// (a quoted identifier, a generated fragment), never a value. The only way to run SQL (`PostgresClient.query`,
/// `PostgresConnection.query`): a `String` is never taken as SQL, so an interpolated value cannot become text by
/// overload. The text of a statement depends only on where it was written, so it is prepared once per connection.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    /// The text with `$1`, `$2`, … where values go.
    public private(set) var sql: String
    /// The values of `$1`, `$2`, …, in order.
    public private(set) var binds: [PostgresValue]

    /// A literal without interpolations: `StaticString`, so a runtime `String` cannot be passed as SQL this way.
    public init(stringLiteral value: StaticString) {
        sql = value.description
        binds = []
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
    }

    /// The text only: values are never printed (they may be tokens or names).
    public var description: String { sql }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [PostgresValue] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
        }

        public mutating func appendLiteral(_ literal: StaticString) { sql += literal.description }

        /// A parameter: `$n` in the text, the value bound.
        public mutating func appendInterpolation(_ value: PostgresValue) {
            binds.append(value)
            sql += "$\(binds.count)"
        }

        public mutating func appendInterpolation(_ value: String) { appendInterpolation(PostgresValue.text(value)) }
        public mutating func appendInterpolation(_ value: String?) { appendInterpolation(PostgresValue.optional(value)) }
        public mutating func appendInterpolation(_ value: Int) { appendInterpolation(PostgresValue.int(value)) }
        public mutating func appendInterpolation(_ value: Int64) { appendInterpolation(PostgresValue.int(value)) }
        public mutating func appendInterpolation(_ value: Int?) { appendInterpolation(value.map { PostgresValue.int(Int64($0)) } ?? .null) }
        public mutating func appendInterpolation(_ value: Int64?) { appendInterpolation(value.map(PostgresValue.int) ?? .null) }
        public mutating func appendInterpolation(_ value: Double?) { appendInterpolation(value.map(PostgresValue.double) ?? .null) }
        public mutating func appendInterpolation(_ value: Double) { appendInterpolation(PostgresValue.double(value)) }
        public mutating func appendInterpolation(_ value: Bool) { appendInterpolation(PostgresValue.bool(value)) }
        public mutating func appendInterpolation(_ value: Date) { appendInterpolation(PostgresValue.timestamp(value)) }
        public mutating func appendInterpolation(_ value: Date?) { appendInterpolation(value.map(PostgresValue.timestamp) ?? .null) }
        public mutating func appendInterpolation(_ value: [String]) { appendInterpolation(PostgresValue.textArray(value)) }
        public mutating func appendInterpolation(_ value: [Int]) { appendInterpolation(PostgresValue.intArray(value.map(Int64.init))) }
        public mutating func appendInterpolation(_ value: [Int64]) { appendInterpolation(PostgresValue.intArray(value)) }
        public mutating func appendInterpolation(_ value: [String?]) { appendInterpolation(PostgresValue.optionalTextArray(value)) }
        public mutating func appendInterpolation(_ value: [Double]) { appendInterpolation(PostgresValue.doubleArray(value)) }
        public mutating func appendInterpolation(_ value: [Double?]) { appendInterpolation(PostgresValue.optionalDoubleArray(value)) }
        public mutating func appendInterpolation(_ value: [Date]) { appendInterpolation(PostgresValue.timestampArray(value)) }

        /// A value of a closed set the schema knows (a status, an owner type) written as an SQL string literal, not
        /// bound: a partial index's predicate (`WHERE status = 'PENDING'`) is matched only by a literal, and a generic
        /// plan keeps it. The one way a status reaches SQL outside the migrations.
        public mutating func appendInterpolation(literal value: some PostgresLiteral) {
            sql += "'" + value.rawValue.replacing("'", with: "''") + "'"
        }

        /// SQL text pasted as is: only text the program builds from constants (an identifier quoted with
        /// `PostgresConnection.quoteIdentifier`, a generated CASE), never a value or anything a user wrote.
        public mutating func appendInterpolation(unescaped text: String) { sql += text }

        /// Another query's SQL, spliced in; its `$n` are renumbered after the parameters already bound here.
        public mutating func appendInterpolation(sql fragment: PostgresQuery) {
            let offset = binds.count
            binds += fragment.binds
            guard offset > 0, !fragment.binds.isEmpty else {
                sql += fragment.sql
                return
            }
            var text = Substring(fragment.sql)
            while let dollar = text.firstIndex(of: "$") {
                sql += text[..<dollar]
                let digits = text[text.index(after: dollar)...].prefix { $0.isASCII && $0.isNumber }
                if let number = Int(digits) {
                    sql += "$\(number + offset)"
                } else {
                    sql += "$"
                }
                text = text[text.index(after: dollar)...].dropFirst(digits.count)
            }
            sql += text
        }
    }
}

extension PostgresQuery {
    /// The text with each `$n` written as `placeholder(n, value)` instead: a statement handed to a tool with
    /// placeholders of its own (pgbench's `:name`). A `$` not followed by digits is kept.
    public func sql(placeholder: (_ number: Int, _ value: PostgresValue) -> String) -> String {
        var out = ""
        var text = Substring(sql)
        while let dollar = text.firstIndex(of: "$") {
            out += text[..<dollar]
            let digits = text[text.index(after: dollar)...].prefix { $0.isASCII && $0.isNumber }
            if let number = Int(digits), number >= 1, number <= binds.count {
                out += placeholder(number, binds[number - 1])
            } else {
                out += "$" + digits
            }
            text = text[text.index(after: dollar)...].dropFirst(digits.count)
        }
        return out + text
    }
}

extension PostgresClient {
    /// Runs one query in its own transaction with `settings` instead of the client's (one round trip, as a pipeline).
    @discardableResult
    public func query(_ query: PostgresQuery, settings: TransactionSettings) async throws -> PostgresRows {
        try await pipelinedTransaction([query], settings: settings)[0]
    }
}

/// A Swift type a text cell decodes to (`PostgresRow.decode`).
public protocol PostgresDecodable {
    static func decode(_ cell: PostgresCell) throws(PostgresError) -> Self
}

extension String: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> String { try cell.string() }
}

extension Int: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Int { try cell.int() }
}

extension Int64: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Int64 { Int64(try cell.int()) }
}

extension Double: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Double { try cell.double() }
}

extension Bool: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Bool { try cell.bool() }
}

extension Date: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Date { try cell.date() }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Wrapped? {
        cell.isNull ? nil : try Wrapped.decode(cell)
    }
}

extension PostgresRow {
    /// The row's columns, in order, as a tuple of types (postgres-nio's `decode((Int, String).self)`): a column of the
    /// wrong type is an error naming it.
    public func decode<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws -> (repeat each Column) {
        var index = 0
        func next<Value: PostgresDecodable>(_ type: Value.Type) throws -> Value {
            defer { index += 1 }
            return try Value.decode(self[index])
        }
        return (repeat try next((each Column).self))
    }
}

extension PostgresCell {
    /// The cell as a Swift type (`row["id"].decode(Int64.self)`).
    public func decode<Value: PostgresDecodable>(_ type: Value.Type) throws(PostgresError) -> Value { try Value.decode(self) }
}

/// A closed set of values one text column holds (`"PushOutbox".status`, `"PushDevice"."ownerType"`): its raw values are
/// the column's strings, written into SQL as literals with `\(literal: value)`.
public protocol PostgresLiteral: RawRepresentable, Sendable where RawValue == String {}

