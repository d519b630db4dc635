import FoundationEssentials
import Logging
import Synchronization
import Timekeeping

/// Whether Apple accepts our App Store Server API key, per environment (docs/operations.md, "Entitlements (App
/// Store)"): a 401 (a revoked key, a wrong issuer or bundle id) is the project's fault, not a row's. The environment
/// pauses with a backoff that starts short (15 s, doubling to 5 minutes), so checks resume soon after the key is fixed;
/// the fault is logged at error once per episode and its end at notice; `onStatus` tells readiness.
final class KeyFaults: Sendable {
    /// The longest pause.
    static let cap = 300.0
    /// The first pause after a refusal (`keyRefusedBackoff`).
    private let first: Double

    private let logger: Logger
    private let onStatus: @Sendable (String?) -> Void
    /// Per environment: consecutive refusals in the current episode.
    private let refusals = Mutex<[AppStoreEnvironment: Int]>([:])

    init(first: Duration, logger: Logger, onStatus: @escaping @Sendable (String?) -> Void) {
        self.first = max(0.01, first.asSeconds)
        self.logger = logger
        self.onStatus = onStatus
    }

    /// Apple refused our JWT in `environment`: returns how long that environment pauses.
    func refused(_ environment: AppStoreEnvironment, during what: String) -> Duration {
        let (count, all) = refusals.withLock { state -> (Int, [AppStoreEnvironment: Int]) in
            state[environment, default: 0] += 1
            return (state[environment]!, state)
        }
        let seconds = min(Self.cap, first * Double(1 << min(count - 1, 10)))
        if count == 1 {
            logger.error("App Store Server API refused our key (401); this environment pauses and retries by itself, entitlements unchanged: check APPSTORE_ISSUER_ID, APPSTORE_KEY_ID, APPSTORE_BUNDLE_ID and the key file",
                         metadata: ["appstore.environment": environment.rawValue, "appstore.during": what])
        }
        onStatus(Self.describe(all))
        return .milliseconds(Int64(seconds * 1000))
    }

    /// Apple answered as it does to a key it accepts (a transaction, not found, a rate limit, a history page).
    func accepted(_ environment: AppStoreEnvironment) {
        let (ended, all) = refusals.withLock { state -> (Bool, [AppStoreEnvironment: Int]) in
            (state.removeValue(forKey: environment) != nil, state)
        }
        guard ended else { return }
        logger.notice("App Store Server API accepts our key again", metadata: ["appstore.environment": environment.rawValue])
        onStatus(Self.describe(all))
    }

    /// The readiness text for the environments still refused, nil when none is.
    static func describe(_ refused: [AppStoreEnvironment: Int]) -> String? {
        guard !refused.isEmpty else { return nil }
        let names = refused.keys.map(\.rawValue).sorted().joined(separator: ", ")
        return "App Store Server API refuses our key (401) in \(names): check APPSTORE_ISSUER_ID, APPSTORE_KEY_ID, APPSTORE_BUNDLE_ID and the key"
    }
}
