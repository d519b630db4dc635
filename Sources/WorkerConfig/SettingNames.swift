/// The one list of setting names (`config/worker.env`) and the near-miss check against it: a variable that looks like a
/// misspelt setting (`MAX_INFLIGHT`) is silently ignored by the loader, so `check-config` and `run` warn about it.
public enum SettingNames {
    /// Every environment variable the worker reads.
    public static let all: [String] = [
        "DATABASE_URL", "DATABASE_LISTEN_URL", "DATABASE_STATEMENT_TIMEOUT",
        "FCM_SERVICE_ACCOUNT_FILE", "FCM_BASE_URL", "FCM_MAX_SENDS_PER_SECOND", "CREDENTIALS_DIRECTORY", "TLS_CA_FILE",
        "HEALTH_ADDR", "BATCH_SIZE", "MAX_IN_FLIGHT", "POLL_INTERVAL_MS", "LEASE_SECONDS", "MAX_ATTEMPTS", "EVENT_MAX_AGE",
        "APPSTORE_ISSUER_ID", "APPSTORE_KEY_ID", "APPSTORE_PRIVATE_KEY_FILE", "APPSTORE_BUNDLE_ID", "APPSTORE_ROOT_CERT_FILES",
        "APPSTORE_PRODUCTION_URL", "APPSTORE_SANDBOX_URL", "APPSTORE_REQUESTS_PER_SECOND", "APPSTORE_NOTIFICATION_HISTORY",
        "APPSTORE_NOTIFICATION_POLL_INTERVAL", "ENTITLEMENT_RECHECK_INTERVAL", "OUTBOX_RETENTION", "DELIVERY_RETENTION",
        "LOG_LEVEL", "SHUTDOWN_TIMEOUT", "HTTPS_PROXY", "NO_PROXY",
    ]

    /// Name prefixes of the settings' families: only variables starting with one of these are compared, so the
    /// rest of a process environment (`PATH`, `NOTIFY_SOCKET`, `INVOCATION_ID`) never draws a warning.
    public static let families: [String] = [
        "DATABASE_", "FCM_", "APPSTORE_", "MAX_", "BATCH_", "POLL_", "LEASE_", "EVENT_", "LOG_", "HEALTH_", "OUTBOX_",
        "DELIVERY_", "SHUTDOWN_", "ENTITLEMENT_", "TLS_", "CREDENTIALS_",
    ]

    /// A variable that is not a setting but looks like one.
    public struct NearMiss: Sendable, Equatable, CustomStringConvertible {
        /// The variable as set, e.g. `MAX_INFLIGHT`.
        public var variable: String
        /// The setting it probably means, e.g. `MAX_IN_FLIGHT`.
        public var suggestion: String

        public var description: String { "\(variable) is not a setting; did you mean \(suggestion)?" }
    }

    /// Variables of `environment` in a setting family that are within two edits of a setting (or equal to one
    /// without underscores or case), each with the closest setting; sorted by name.
    public static func nearMisses(in environment: [String: String]) -> [NearMiss] {
        let known = Set(all)
        return environment.keys.sorted().compactMap { name -> NearMiss? in
            guard !known.contains(name) else { return nil }
            let upper = name.uppercased()
            guard families.contains(where: { upper.hasPrefix($0) }) else { return nil }
            let squashed = upper.filter { $0 != "_" }
            var best: (name: String, distance: Int)?
            for candidate in all {
                let distance = candidate.filter({ $0 != "_" }) == squashed ? 0 : editDistance(upper, candidate)
                if distance <= 2, distance < best?.distance ?? .max { best = (candidate, distance) }
            }
            return best.map { NearMiss(variable: name, suggestion: $0.name) }
        }
    }

    /// Levenshtein distance with adjacent transpositions (optimal string alignment), by UTF-8 bytes.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8), b = Array(b.utf8)
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var previous2 = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], previous2[j - 2] + 1)
                }
            }
            (previous2, previous, current) = (previous, current, previous2)
        }
        return previous[b.count]
    }
}
