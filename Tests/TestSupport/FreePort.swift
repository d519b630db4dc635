import Foundation
import Synchronization

/// Loopback ports for servers a test starts itself (PostgreSQL, nginx, stunnel, …), which bind the port after it
/// is picked. Picked below the kernel's ephemeral range (32768–60999 on Linux), so that no client socket takes one
/// in that gap (or, connecting while nothing listens there yet, connects to itself), and never twice in a process:
/// a port the kernel picked (bind 0) was free only until the next socket of a test running beside it.
public enum FreePort {
    private static let range: ClosedRange<Int> = 20_000...32_000
    private static let cursor = Mutex(range.lowerBound + Int(getpid()) % 400 * 30)

    /// A port nothing listens on now and this process has not handed out before (until the range wraps).
    public static func next() -> UInt16 {
        while true {
            let port = cursor.withLock { port -> Int in
                defer { port = port >= range.upperBound ? range.lowerBound : port + 1 }
                return port
            }
            if canBind(UInt16(port)) { return UInt16(port) }
        }
    }

    /// Whether a server could bind the port now (with SO_REUSEADDR, as servers do, so a TIME_WAIT does not count).
    private static func canBind(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        return withIPv4Address(port: port) { bind(fd, $0, $1) } == 0
    }
}
