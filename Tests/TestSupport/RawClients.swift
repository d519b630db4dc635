import Foundation

/// Raw TCP clients for abuse tests: connections that trickle a request and never finish it, from a chosen
/// loopback source address (all of 127/8 is loopback on Linux), and requests read byte by byte.
public enum RawClients {
    /// Raises this process's soft RLIMIT_NOFILE to at least `wanted` (up to the hard limit); returns the soft limit now.
    @discardableResult
    public static func raiseOpenFileLimit(to wanted: Int) -> Int {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < rlim_t(wanted) {
            limit.rlim_cur = min(rlim_t(wanted), limit.rlim_max)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return Int(limit.rlim_cur)
    }

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
}
