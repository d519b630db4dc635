import Foundation

/// Raw TCP clients for abuse tests: connections that trickle a request and never finish it, from a chosen
/// loopback source address (all of 127/8 is loopback on Linux), and requests read byte by byte.
public enum RawClients {
    /// A non-blocking TCP socket bound to `source`, connecting to 127.0.0.1:`port`; -1 when out of descriptors.
    public static func connect(port: UInt16, from source: String = "127.0.0.1") -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return -1 }
        _ = withIPv4Address(source, port: 0) { bind(fd, $0, $1) }
        _ = withIPv4Address(port: port) { Glibc.connect(fd, $0, $1) }
        return fd
    }

    /// Waits up to `milliseconds` for `fd` to be writable (connected) or readable.
    public static func wait(_ fd: Int32, events: Int16, milliseconds: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: events, revents: 0)
        return poll(&entry, 1, milliseconds) > 0 && entry.revents & events != 0
    }

    /// Sends what it can of `text` without blocking.
    @discardableResult
    public static func send(_ fd: Int32, _ text: String) -> Int {
        Array(text.utf8).withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// What arrived on `fd` within `seconds` (until the peer closes, or the time is up), as text.
    public static func read(_ fd: Int32, seconds: Double, until done: (String) -> Bool = { _ in false }) -> String {
        var received: [UInt8] = []
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            guard wait(fd, events: Int16(POLLIN), milliseconds: 50) else { continue }
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received += buffer[..<count]
            if done(String(decoding: received, as: UTF8.self)) { break }
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// What became of a request followed by a flood of body bytes (`flood`).
    public struct FloodOutcome: Sendable {
        /// What the server sent back, as text.
        public var answer: String
        /// Body bytes the socket took before the server closed (or all of them).
        public var sent: Int
        /// Whether the server closed the connection (end of stream or a reset) within the time.
        public var closedByServer: Bool
    }

    /// Sends `head`, then up to `bytes` zeros as fast as the socket takes them, reading whatever comes back, until the
    /// server closes the connection, everything is sent, or `seconds` pass; then reads on until close or time's up.
    public static func flood(port: UInt16, head: String, bytes: Int, seconds: Double) -> FloodOutcome {
        let fd = connect(port: port)
        defer { close(fd) }
        var outcome = FloodOutcome(answer: "", sent: 0, closedByServer: false)
        guard fd >= 0, wait(fd, events: Int16(POLLOUT), milliseconds: 2000) else { return outcome }
        send(fd, head)
        let zeros = [UInt8](repeating: 0, count: 64 * 1024)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, !outcome.closedByServer {
            var entry = pollfd(fd: fd, events: Int16(POLLIN) | (outcome.sent < bytes ? Int16(POLLOUT) : 0), revents: 0)
            guard poll(&entry, 1, 50) > 0 else { continue }
            if entry.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count > 0 { received += buffer[..<count] } else if count == 0 || errno != EAGAIN { outcome.closedByServer = true }
            }
            if outcome.sent < bytes, entry.revents & Int16(POLLOUT) != 0 {
                let count = zeros.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, min($0.count, bytes - outcome.sent), Int32(MSG_NOSIGNAL)) }
                if count > 0 { outcome.sent += count } else if errno == EPIPE || errno == ECONNRESET { outcome.closedByServer = true }
            }
        }
        // A server that answers and closes while the body is still arriving makes its kernel reset the connection, and
        // the send above can see the reset before the poll sees the answer. The answer is still queued here: read it.
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard count > 0 else { break }
            received += buffer[..<count]
        }
        outcome.answer = String(decoding: received, as: UTF8.self)
        return outcome
    }
}
