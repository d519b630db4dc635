import Foundation
import Synchronization

/// An AF_UNIX datagram socket standing in for systemd's NOTIFY_SOCKET: the daemon under test
/// sends READY=1, STATUS=…, WATCHDOG=1, STOPPING=1 to it. A background thread drains it the way
/// systemd does (an unread socket fills up after a few datagrams and would block the sender).
public final class NotifySocket: Sendable {
    private struct State {
        var messages: [String] = []
        var cursor = 0
        var closed = false
    }

    /// Shared with the draining thread, which must not keep the socket alive (it ends when the socket is released).
    private final class Shared: Sendable {
        let state = Mutex(State())
    }

    public let path: String
    private let fd: Int32
    private let shared = Shared()

    public init() throws {
        path = NSTemporaryDirectory() + "mw-notify-\(UUID().uuidString.prefix(8)).sock"
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket() failed") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            let bytes = Array(path.utf8)
            for (index, byte) in bytes.enumerated() where index < buffer.count - 1 { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw TestSupportError("bind(\(path)) failed") }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let (drained, socket) = (shared, fd)
        let thread = Thread { Self.drain(fd: socket, shared: drained) }
        thread.start()
    }

    deinit {
        shared.state.withLock { $0.closed = true }
        close(fd)
        unlink(path)
    }

    /// Reads until the socket is released (`closed`; the receive timeout makes the loop look every 100 ms).
    private static func drain(fd: Int32, shared: Shared) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !shared.state.withLock({ $0.closed }) {
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { continue }
            let message = String(decoding: buffer.prefix(count), as: UTF8.self)
            shared.state.withLock { $0.messages.append(message) }
        }
    }

    /// Returns messages not returned before, up to and including the first that satisfies
    /// `predicate`, waiting up to `seconds` for it; on timeout, everything new.
    public func read(until predicate: (String) -> Bool, seconds: Double) async throws -> [String] {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let result = shared.state.withLock { state -> [String]? in
                let fresh = state.messages[state.cursor...]
                if let index = fresh.firstIndex(where: predicate) {
                    defer { state.cursor = index + 1 }
                    return Array(state.messages[state.cursor...index])
                }
                if Date() >= deadline {
                    defer { state.cursor = state.messages.count }
                    return Array(fresh)
                }
                return nil
            }
            if let result { return result }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
