import CSystemd
import Glibc

/// What the daemon does to its own process at start, besides what the unit sets (`LimitCORE=0`): secrets in
/// memory (the FCM and App Store keys, `DATABASE_URL`, access tokens) must never reach a core file.
public enum ProcessHardening {
    /// Marks the process non-dumpable and sets RLIMIT_CORE to 0 (soft and hard); returns true when both hold.
    @discardableResult
    public static func disableCoreDumps() -> Bool {
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        let limited = setrlimit(Int32(RLIMIT_CORE.rawValue), &none) == 0
        return mw_set_not_dumpable() == 0 && limited
    }
}
