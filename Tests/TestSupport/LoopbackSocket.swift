import Foundation

/// A TCP socket listening on 127.0.0.1, on a port the kernel picks: a server that accepts connections (the kernel
/// completes the handshake into the backlog) and never answers. Servers a test starts take `FreePort.next()`.
public struct LoopbackSocket {
    public let fd: Int32
    public let port: UInt16

    public init() {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        _ = withIPv4Address(port: 0) { bind(fd, $0, $1) }
        _ = Glibc.listen(fd, 8)
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        self.fd = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    public func close() { _ = Glibc.close(fd) }
}

/// `body` (a bind or a connect) called with `host`:`port` (IPv4, loopback by default) as a `sockaddr` and its length.
public func withIPv4Address<Result>(_ host: String = "127.0.0.1", port: UInt16,
                                    _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = port.bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}
