import CLibPQ

/// A connection string as libpq reads it (key=value or URI, several hosts included), for checks that look at its
/// settings without connecting.
public enum ConninfoParameters {
    /// Every parameter the string sets (libpq's defaults and environment variables left out); nil when libpq
    /// cannot parse it.
    public static func parse(_ conninfo: String) -> [String: String]? {
        // "PQconninfoParse: Returns parsed connection options from the provided connection string ... The return value
        // must be freed with PQconninfoFree ... if errmsg is not NULL, ... must be freed with PQfreemem" (libpq docs).
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &error) else {
            if let error { PQfreemem(error) }
            return nil
        }
        defer { PQconninfoFree(options) }
        var parameters: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { parameters[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        return parameters
    }

    /// The hosts it reaches (`host` and `hostaddr`, comma-separated lists); empty for the default (a local socket).
    public static func hosts(_ parameters: [String: String]) -> [String] {
        ["host", "hostaddr"].flatMap { (parameters[$0] ?? "").split(separator: ",").map(String.init) }.filter { !$0.isEmpty }
    }

    /// A unix socket directory, `localhost`, 127.0.0.0/8 or ::1: traffic that never leaves the machine.
    public static func isLocal(_ host: String) -> Bool {
        if host.hasPrefix("/") || host.hasPrefix("@") || host.lowercased() == "localhost" || host == "::1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }
}
