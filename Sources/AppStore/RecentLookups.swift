import Synchronization

/// The outcomes of the most recent App Store lookups, for `/readyz` `app_store`. A sweep whose lookups all fail (a
/// wrong root certificate: every one `untrusted_chain`; a wrong bundle id: every one `not_found`) is an outage of the
/// re-checks, not a series of bad rows: refunds stop being applied.
final class RecentLookups: Sendable {
    /// How many of the latest lookups are judged.
    static let window = 20
    /// Fewer lookups than this say nothing either way (a handful of deleted test purchases).
    static let minimum = 5
    /// The results that are a verified answer; every other result is a failure.
    static let successes: Set<String> = ["active", "revoked", "restored", "unchanged"]

    private let results = Mutex<[String]>([])
    private let onStatus: @Sendable (String?) -> Void

    /// `onStatus` hears the problem (every recent lookup failed, and how) or nil, after every lookup.
    init(onStatus: @escaping @Sendable (String?) -> Void) { self.onStatus = onStatus }

    /// Records one lookup's result (an `entitlement_checks_total` label).
    func record(_ result: String) {
        let latest = results.withLock { results -> [String] in
            results.append(result)
            if results.count > Self.window { results.removeFirst(results.count - Self.window) }
            return results
        }
        onStatus(Self.problem(latest))
    }

    /// "every recent App Store lookup failed (the last 20: untrusted_chain 20)", or nil while any succeeded.
    static func problem(_ results: [String]) -> String? {
        guard results.count >= minimum, !results.contains(where: successes.contains) else { return nil }
        var tally: [String: Int] = [:]
        for result in results { tally[result, default: 0] += 1 }
        let ordered = tally.sorted { (a: (key: String, value: Int), b: (key: String, value: Int)) -> Bool in
            a.value != b.value ? a.value > b.value : a.key < b.key
        }
        let counts = ordered.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return "every recent App Store lookup failed (the last \(results.count): \(counts)): refunds are not being applied"
    }
}

/// `/readyz` `app_store` from its two sources: Apple refusing our key (it says why) comes first, then lookups that all
/// fail; nil when neither holds.
final class AppStoreReadiness: Sendable {
    private let reasons = Mutex<(key: String?, lookups: String?)>((nil, nil))
    private let report: @Sendable (String?) -> Void

    /// `report` hears the reason `/readyz` shows (nil: ok) each time it changes.
    init(report: @escaping @Sendable (String?) -> Void) { self.report = report }

    /// Apple refuses our key (why), or accepts it again (nil).
    func key(_ reason: String?) { update { $0.key = reason } }

    /// Every recent lookup failed (how), or one succeeded (nil).
    func lookups(_ reason: String?) { update { $0.lookups = reason } }

    private func update(_ change: (inout (key: String?, lookups: String?)) -> Void) {
        // Reported under the lock, so two sources changing at once cannot report out of order.
        reasons.withLock { reasons in
            let before = reasons.key ?? reasons.lookups
            change(&reasons)
            let after = reasons.key ?? reasons.lookups
            if after != before { report(after) }
        }
    }
}
