/// Secrets out of text that is logged, printed or served: connection strings, and libpq's messages about them.
/// One function for every place (check-config, the journal, the Postgres module's errors), so they cannot drift.
public enum SecretRedaction {
    /// `text` with any password of a conninfo string or URI replaced by `***`, and, when it is one of libpq's
    /// complaints about a connection string, everything it quotes replaced by `"***"`: libpq quotes the offending
    /// part of the string (`invalid percent-encoded token: "<password>"`, `missing "=" after "<part of a password>"
    /// in connection info string`), so a password with a raw `%` or a space would be repeated whole or in part.
    public static func conninfo(_ text: String) -> String {
        var result = text
        // URI form, scheme://user:password@host, anywhere in a line: from the scheme to the line's end, the user info
        // runs to the last '@' (a password may hold '@', '/' or a space). Over-redacting a line that names an
        // address after the URI is the safe side.
        // Swift Regex (the standard library's string processing): no Foundation's NSRegularExpression in the daemon.
        let uri = try! Regex(#"[A-Za-z][A-Za-z0-9+.\-]*://[^\n]*@[^\n]*"#).matchingSemantics(.unicodeScalar)
        result = result.replacing(uri) { match in
            url(String(text.unicodeScalars[match.range]), schemeRequired: true)
        }
        // key=value form and URI query parameters.
        result = result.replacing(try! Regex(#"password\s*=\s*('([^'\\]|\\.)*'|[^\s&]+)"#).matchingSemantics(.unicodeScalar), with: "password=***")
        if isConnectionStringComplaint(result) {
            // From the first quote to the last on each line: a password may itself hold a quote.
            result = result.replacing(try! Regex(#""[^\n]*""#).matchingSemantics(.unicodeScalar), with: #""***""#)
        }
        return result
    }

    /// A URL-like setting's value (`DATABASE_URL`, `HTTPS_PROXY`, ...) as it may be shown: any user info, with or
    /// without a scheme (`alice:pw@squid:3128`, libcurl's proxy form), up to the last '@', becomes `user:***` (or
    /// `***` when it has no ':'), and any `password=` of a key=value connection string `***`.
    public static func setting(_ value: String) -> String {
        // A key=value connection string (`host=db password=p@ss`) has no user info, only a password key.
        let isKeyValue = value.firstMatch(of: try! Regex(#"^\s*[A-Za-z_]+\s*="#).matchingSemantics(.unicodeScalar)) != nil
        return conninfo(isKeyValue ? value : url(value, schemeRequired: false))
    }

    /// `text` (one URL, with a scheme or, unless `schemeRequired`, without) with its user info up to the last '@'
    /// redacted. By scalars throughout: a combining mark after the ':' must not make it part of another character.
    static func url(_ text: String, schemeRequired: Bool) -> String {
        let scalars = text.unicodeScalars
        var start = scalars.startIndex
        if let scheme = text.firstMatch(of: try! Regex(#"^[A-Za-z][A-Za-z0-9+.\-]*://"#).matchingSemantics(.unicodeScalar)) {
            start = scheme.range.upperBound
        } else if schemeRequired {
            return text
        }
        guard let at = scalars[start...].lastIndex(of: "@") else { return text }
        let userInfo = scalars[start..<at]
        var result = String(scalars[..<start])
        if let colon = userInfo.firstIndex(of: ":") {
            result.unicodeScalars.append(contentsOf: scalars[start..<colon])
            result += ":***"
        } else {
            result += "***"
        }
        result.unicodeScalars.append(contentsOf: scalars[at...])
        return result
    }

    /// `text` with everything between its first and last quote on each line replaced by `"***"`: for a complaint
    /// known to come from libpq's connection-string parser, which quotes the part it cannot parse.
    public static func redactingQuotes(_ text: String) -> String {
        text.replacing(try! Regex(#""[^\n]*""#).matchingSemantics(.unicodeScalar), with: #""***""#)
    }

    /// libpq's wording when it cannot parse a connection string (fe-connect.c, PostgreSQL 15 to 17).
    static let complaints = ["connection info string", "percent-encoded", "URI", "invalid connection option", "unexpected spaces found",
                             "conninfo"]

    static func isConnectionStringComplaint(_ text: String) -> Bool { complaints.contains { text.contains($0) } }
}
