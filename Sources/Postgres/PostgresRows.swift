import FoundationEssentials

/// The rows of one statement's result, copied out of the `PGresult` (which is freed at once).
public struct PostgresRows: Sendable, Sequence {
    /// Column names in result order.
    public let columns: [String]
    let values: [[String?]]
    /// Rows affected for INSERT/UPDATE/DELETE (`PQcmdTuples`), 0 otherwise.
    public let affectedRows: Int

    init(columns: [String], values: [[String?]], affectedRows: Int) {
        self.columns = columns
        self.values = values
        self.affectedRows = affectedRows
    }

    /// Number of rows.
    public var count: Int { values.count }
    public var isEmpty: Bool { values.isEmpty }
    /// The first row, if any.
    public var first: PostgresRow? { values.isEmpty ? nil : self[0] }

    public subscript(index: Int) -> PostgresRow { PostgresRow(columns: columns, values: values[index]) }

    /// A column found by name once per result, for reading many rows without a lookup per cell
    /// (`let id = rows.column("id")`, then `row[id]`); a missing column is a programming error and traps.
    public func column(_ name: String) -> PostgresColumn {
        guard let index = columns.firstIndex(of: name) else {
            preconditionFailure("result has no column \(name); columns: \(columns)")
        }
        return PostgresColumn(name: name, index: index)
    }

    public func makeIterator() -> AnyIterator<PostgresRow> {
        var index = 0
        return AnyIterator {
            guard index < values.count else { return nil }
            defer { index += 1 }
            return self[index]
        }
    }
}

/// One result row; cells are looked up by column name.
public struct PostgresRow: Sendable {
    let columns: [String]
    let values: [String?]

    /// The cell of `column`; a missing column is a programming error and traps.
    public subscript(_ column: String) -> PostgresCell {
        guard let index = columns.firstIndex(of: column) else {
            preconditionFailure("result has no column \(column); columns: \(columns)")
        }
        return PostgresCell(column: column, text: values[index])
    }

    /// The cell at a 0-based position.
    public subscript(_ index: Int) -> PostgresCell { PostgresCell(column: columns[index], text: values[index]) }

    /// The cell of a column resolved once for the whole result (`PostgresRows.column`): by name, without a lookup per row.
    public subscript(_ column: PostgresColumn) -> PostgresCell { PostgresCell(column: column.name, text: values[column.index]) }
}

/// A result column by name, with its position resolved (`PostgresRows.column`).
public struct PostgresColumn: Sendable {
    /// The column's name, for errors.
    public let name: String
    let index: Int
}

/// One value in text format, decoded on request.
public struct PostgresCell: Sendable {
    public let column: String
    /// The raw text, nil for NULL.
    public let text: String?

    public var isNull: Bool { text == nil }

    /// The value as text; throws on NULL.
    public func string() throws(PostgresError) -> String {
        guard let text else { throw decodeError("text", "NULL") }
        return text
    }

    public func int() throws(PostgresError) -> Int {
        guard let text, let value = Int(text) else { throw decodeError("integer", text ?? "NULL") }
        return value
    }

    public func double() throws(PostgresError) -> Double {
        guard let text, let value = Double(text) else { throw decodeError("double", text ?? "NULL") }
        return value
    }

    public func bool() throws(PostgresError) -> Bool {
        switch text {
        case "t", "true": return true
        case "f", "false": return false
        default: throw decodeError("boolean", text ?? "NULL")
        }
    }

    /// A `timestamptz` in ISO DateStyle (`2026-02-11 08:03:27.123456+00`, any offset), read by Foundation: the server's
    /// own text needs no stricter reader (docs/benchmark.md, "JSON and timestamps read by Foundation").
    public func date() throws(PostgresError) -> Date {
        guard let text, let date = try? Self.timestampStyle.parse(text) else { throw decodeError("timestamp", text ?? "NULL") }
        return date
    }

    private static let timestampStyle = Date.ISO8601FormatStyle(dateTimeSeparator: .space, includingFractionalSeconds: true)

    /// A text value that names one case of `type` (a status column): decoded once, where the row is read. A value the
    /// type does not know is an error naming the column (it would mean a schema this build does not understand).
    public func decode<T: RawRepresentable>(_ type: T.Type) throws(PostgresError) -> T where T.RawValue == String {
        guard let text, let value = T(rawValue: text) else { throw decodeError("\(T.self)", text ?? "NULL") }
        return value
    }

    /// Optional variants: nil for NULL, throw for a value of the wrong shape.
    public func optionalString() -> String? { text }
    public func optionalInt() throws(PostgresError) -> Int? { text == nil ? nil : try int() }
    public func optionalDate() throws(PostgresError) -> Date? { text == nil ? nil : try date() }

    private func decodeError(_ type: String, _ found: String) -> PostgresError {
        // The value is not echoed: it may be a token or a name.
        PostgresError(.decodingFailed, message: "column \(column) is not a valid \(type)\(found == "NULL" ? " (NULL)" : "")")
    }
}
