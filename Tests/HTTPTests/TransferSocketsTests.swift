import CCurl
import Foundation
@testable import HTTP
import TestSupport
import Testing

/// The write coalescing of the HTTP client, on a real loopback TCP connection: what is written to a
/// corked socket stays in its send queue until the release, and leaves at once when released.
@Suite("Write coalescing on a TCP socket")
struct TransferSocketsTests {
    /// A connected pair: the client side (corked as libcurl's sockets are) and the accepted side.
    static func connectedPair() throws -> (client: Int32, server: Int32, listener: LoopbackSocket) {
        let listener = LoopbackSocket()
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        TransferSockets.cork(client)
        let connected = withIPv4Address(port: listener.port) { connect(client, $0, $1) }
        try #require(connected == 0)
        let server = accept(listener.fd, nil, nil)
        try #require(server >= 0)
        return (client, server, listener)
    }

    /// Bytes the peer can read now, without waiting.
    static func readable(_ fd: Int32) -> Int {
        var buffer = [UInt8](repeating: 0, count: 4096)
        return max(0, recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT)))
    }

    @Test func smallWritesWaitForTheRelease_thenLeaveTogether() throws {
        let (client, server, listener) = try Self.connectedPair()
        defer { close(client); close(server); listener.close() }
        // Two frames' worth, as libcurl writes a HEADERS and a DATA frame.
        #expect(send(client, "HEADERS", 7, 0) == 7)
        #expect(send(client, "DATA", 4, 0) == 4)
        #expect(Self.readable(server) == 0, "a corked socket sent before the release")
        TransferSockets.release([client])
        #expect(Self.readable(server) == 11)
        // Corked again: the next turn's writes wait for the next release.
        #expect(send(client, "NEXT", 4, 0) == 4)
        #expect(Self.readable(server) == 0)
        TransferSockets.release([client])
        #expect(Self.readable(server) == 4)
    }
}
