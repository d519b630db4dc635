import CLibPQ
import FoundationEssentials
import TextSupport

/// A connection string as libpq reads it (key=value or URI, several hosts included), for checks that look at its
/// settings without connecting.
public enum ConninfoParameters {
    /// Every parameter the string sets (libpq's defaults and environment variables left out); nil when libpq
    /// cannot parse it.
    public static func parse(_ conninfo: String) -> [String: String]? {
        if case .success(let parameters) = parsed(conninfo) { return parameters }
        return nil
    }

    /// Why libpq cannot parse `conninfo`, in its own words with whatever it quotes of the string replaced by `"***"`
    /// (it quotes the offending part, a password included: `SecretRedaction.conninfo`); nil when it parses.
    public static func problem(_ conninfo: String) -> String? {
        guard case .failure(let failure) = parsed(conninfo) else { return nil }
        return failure.text
    }

    private static func parsed(_ conninfo: String) -> Result<[String: String], ParseFailure> {
        // "PQconninfoParse: Returns parsed connection options from the provided connection string ... The return value
        // must be freed with PQconninfoFree ... if errmsg is not NULL, ... must be freed with PQfreemem" (libpq docs).
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &error) else {
            // libpq returns NULL without a message only when it is out of memory.
            let text = error.map { String(cString: $0) } ?? "out of memory"
            if let error { PQfreemem(error) }
            return .failure(ParseFailure(text: SecretRedaction.conninfo(SecretRedaction.redactingQuotes(text.trimmingWhitespace()))))
        }
        defer { PQconninfoFree(options) }
        var parameters: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { parameters[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        return .success(parameters)
    }

    /// libpq's complaint, redacted.
    private struct ParseFailure: Error, CustomStringConvertible {
        var text: String
        var description: String { text }
    }

    /// `parameters` as libpq completes them before connecting, for the settings that decide where it connects and how:
    /// what the string leaves unset comes from its service (`service=` or `PGSERVICE`, in `PGSERVICEFILE` or
    /// `~/.pg_service.conf`, then `PGSYSCONFDIR`'s or Debian's `/etc/postgresql-common/pg_service.conf`), then from
    /// `PGHOST`, `PGHOSTADDR`, `PGSSLMODE` (libpq's `conninfo_add_defaults`: the string, the service, the environment).
    public static func effective(_ parameters: [String: String], environment: [String: String]) -> [String: String] {
        var result = parameters
        if let service = parameters["service"] ?? environment["PGSERVICE"] {
            for (key, value) in serviceParameters(service, environment: environment) where result[key] == nil { result[key] = value }
        }
        for (key, variable) in [("host", "PGHOST"), ("hostaddr", "PGHOSTADDR"), ("sslmode", "PGSSLMODE")] where result[key] == nil {
            if let value = environment[variable], !value.isEmpty { result[key] = value }
        }
        return result
    }

    /// The `key=value` lines of `[service]` in the first service file that has that section (libpq's search order).
    static func serviceParameters(_ service: String, environment: [String: String]) -> [String: String] {
        let userFile = environment["PGSERVICEFILE"] ?? environment["HOME"].map { "\($0)/.pg_service.conf" }
        let systemFile = "\(environment["PGSYSCONFDIR"] ?? "/etc/postgresql-common")/pg_service.conf"
        for file in [userFile, systemFile].compactMap({ $0 }) {
            // A service file is a few lines; one larger than 1 MiB is not read (libpq would still use it).
            guard case .success(let bytes) = BoundedFile.read(file, limit: 1024 * 1024) else { continue }
            let text = String(decoding: bytes, as: UTF8.self)
            var inSection = false
            var found = false
            var values: [String: String] = [:]
            for raw in text.split(whereSeparator: \.isNewline) {
                let line = raw.trimmingWhitespace()
                if line.hasPrefix("[") {
                    inSection = line == "[\(service)]"
                    found = found || inSection
                } else if inSection, let equals = line.firstIndex(of: "="), !line.hasPrefix("#") {
                    values[String(line[..<equals]).trimmingWhitespace()] = String(line[line.index(after: equals)...]).trimmingWhitespace()
                }
            }
            if found { return values }
        }
        return [:]
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
