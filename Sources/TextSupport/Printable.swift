/// The one escaping of text a person reads: every log value (the text sink and the journal's fields), every line an
/// operator command prints on stdout or stderr. Text from a client app, the database or a peer (a device token, a
/// payload's `recordingGroupId`, `"lastError"`) cannot move the cursor, retitle or clear a terminal, forge a line or
/// hide text this way.
///
/// Escaped: every control character (C0 `U+0000`–`U+001F` including `\t` and `\r`, DEL `U+007F`, C1 `U+0080`–`U+009F`),
/// the line and paragraph separators (`U+2028`, `U+2029`) and the bidirectional controls (`U+202E` …). Written in
/// Swift's notation: `\n`, `\r`, `\t`, else `\u{1B}` (upper-case hex, no padding). Everything else is kept as it is,
/// other non-ASCII text included (`服薬記録`, `é`). A backslash is kept too: where a reader must tell a literal
/// `\u{1B}` from an escaped ESC, the format quotes its values and doubles backslashes first (`TextSink`).
public enum Printable {
    /// `text` on one line: every character that needs it escaped, line breaks included.
    public static func escaped(_ text: String) -> String {
        guard needsEscaping(text) else { return text }
        return escape(text, keepingLineFeeds: false)
    }

    /// `text` of several lines (a command's report, an error message): the `\n` between lines kept, everything else
    /// escaped as `escaped` does, `\r` included (a `\r\n` would let a value overwrite the start of its line).
    public static func lines(_ text: String) -> String {
        guard needsEscaping(text) else { return text }
        return escape(text, keepingLineFeeds: true)
    }

    // By scalars: "\r\n" is one Character, and a combining mark after a control would hide it inside another.
    private static func escape(_ text: String, keepingLineFeeds: Bool) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n" where keepingLineFeeds: out.unicodeScalars.append(scalar)
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where isUnsafe(scalar): out += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// A JSON document safe on a terminal: every character `escaped` would escape, apart from the whitespace JSON allows
    /// between tokens (`\t`, `\n`, `\r`, which a JSON writer must already escape inside strings), written as JSON's
    /// `\u001b`. Valid for any JSON text: outside strings JSON has only ASCII, so what is escaped is inside a string.
    public static func json(_ document: String) -> String {
        guard document.unicodeScalars.contains(where: { isUnsafe($0) && !isJSONWhitespace($0) }) else { return document }
        var out = ""
        out.reserveCapacity(document.utf8.count + 8)
        for scalar in document.unicodeScalars {
            if isUnsafe(scalar) && !isJSONWhitespace(scalar) {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether `text` holds anything `escaped` would change.
    public static func needsEscaping(_ text: String) -> Bool {
        // Plain ASCII (almost every log value) is decided byte by byte without Unicode property lookups.
        for byte in text.utf8 where byte < 0x20 || byte >= 0x7F {
            if byte < 0x20 || byte == 0x7F { return true }
            return text.unicodeScalars.contains(where: isUnsafe)
        }
        return false
    }

    /// A control character (C0, DEL, C1), a line or paragraph separator, or a bidirectional control.
    public static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.value < 0x20 || scalar.value == 0x7F { return true }
        if scalar.value < 0x80 { return false }
        switch scalar.properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator: return true
        default: return scalar.properties.isBidiControl
        }
    }

    private static func isJSONWhitespace(_ scalar: Unicode.Scalar) -> Bool { scalar == "\t" || scalar == "\n" || scalar == "\r" }
}
