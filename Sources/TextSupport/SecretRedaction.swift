/// Secrets out of text that is logged, printed or served: connection strings, and libpq's messages about them.
/// One function for every place (check-config, the journal, the Postgres module's errors), so they cannot drift.
public enum SecretRedaction {
    /// `text` with any password of a conninfo string or URI replaced by `***`, and, when it is one of libpq's
    /// complaints about a connection string, everything it quotes replaced by `"***"`: libpq quotes the offending
    /// part of the string (`invalid percent-encoded token: "<password>"`, `missing "=" after "<part of a password>"
    /// in connection info string`), so a password with a raw `%` or a space would be repeated whole or in part.
    public static func conninfo(_ text: String) -> String {
        var result = text
        // URI form: scheme://user:password@host
        // Swift Regex (the standard library's string processing): no Foundation's NSRegularExpression in the daemon.
        if let match = result.firstMatch(of: try! Regex(#"://[^/@:]*:[^/@]*@"#).matchingSemantics(.unicodeScalar)) {
            // By scalars throughout: a combining mark after the ':' must not make it part of another character.
            let userInfo = result.unicodeScalars[match.range]
            if let colon = userInfo.dropFirst(3).firstIndex(of: ":") {
                result.unicodeScalars.replaceSubrange(colon..<userInfo.index(before: userInfo.endIndex), with: ":***".unicodeScalars)
            }
        }
        // key=value form and URI query parameters.
        result = result.replacing(try! Regex(#"password\s*=\s*('([^'\\]|\\.)*'|[^\s&]+)"#).matchingSemantics(.unicodeScalar), with: "password=***")
        if isConnectionStringComplaint(result) {
            // From the first quote to the last on each line: a password may itself hold a quote.
            result = result.replacing(try! Regex(#""[^\n]*""#).matchingSemantics(.unicodeScalar), with: #""***""#)
        }
        return result
    }

    /// libpq's wording when it cannot parse a connection string (fe-connect.c, PostgreSQL 15 to 17).
    static let complaints = ["connection info string", "percent-encoded", "URI", "invalid connection option", "unexpected spaces found",
                             "conninfo"]

    static func isConnectionStringComplaint(_ text: String) -> Bool { complaints.contains { text.contains($0) } }
}
