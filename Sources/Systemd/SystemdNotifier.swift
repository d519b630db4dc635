import CSystemd
import FoundationEssentials
import Glibc

/// The sd_notify protocol through libsystemd: READY=1, STATUS=…, WATCHDOG=1, STOPPING=1.
/// Outside systemd (no `NOTIFY_SOCKET`) every call is a no-op.
public struct SystemdNotifier: Sendable {
    public init() {}

    /// True when systemd (or a test) gave us a notification socket.
    public var isEnabled: Bool { ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] != nil }

    /// Same as `isEnabled`: started by systemd with `Type=notify` (a `NOTIFY_SOCKET` is set).
    public var isUnderSystemd: Bool { isEnabled }

    /// Sends one or more newline-separated assignments; returns false when nothing was sent.
    @discardableResult
    public func notify(_ state: String) -> Bool {
        // "unset_environment: if non-zero, NOTIFY_SOCKET is unset after the call" (sd_notify(3)); we keep it.
        sd_notify(0, state) > 0
    }

    /// `WatchdogSec=` as a duration when the watchdog is on for this process (sd_watchdog_enabled(3)).
    public var watchdogInterval: Duration? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return .microseconds(Int64(usec))
    }
}

/// Native journal entries through sd_journal_sendv.
public enum Journal {
    /// Sends one entry; `fields` are `NAME=value` pairs (names upper-case, `MESSAGE` and `PRIORITY` included).
    @discardableResult
    public static func send(fields: [(String, String)]) -> Bool {
        let strings = fields.map { "\($0.0)=\($0.1)" }
        var buffers = strings.map { Array($0.utf8) }
        return buffers.withUnsafeMutableBufferPointer { all -> Bool in
            var vectors: [iovec] = []
            vectors.reserveCapacity(all.count)
            for index in all.indices {
                all[index].withUnsafeMutableBytes { bytes in
                    vectors.append(iovec(iov_base: bytes.baseAddress, iov_len: bytes.count))
                }
            }
            // The byte arrays are not moved while `all` is borrowed, so the pointers stay valid.
            return sd_journal_sendv(vectors, Int32(vectors.count)) == 0
        }
    }

    /// True when stderr is connected to the journal (`JOURNAL_STREAM` names stderr's device and inode).
    public static var stderrIsJournal: Bool {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(2, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}
