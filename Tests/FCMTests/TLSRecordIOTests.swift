import CCurl
import Foundation
@testable import HTTP
import Testing

/// The BIOs that carry a TLS connection's records once its handshake is done (`tls_io.h` in the CCurl shim), on a real
/// socket pair, asked for bytes the way OpenSSL asks (a record's 5-byte header, then its body).
///
/// The reader's promise is what libcurl 7.88 depends on: it takes from the socket no byte beyond the record OpenSSL is
/// reading, so a record that has arrived and is not read yet stays where `poll` shows it. The writer's: nothing leaves
/// before the flush, everything leaves in order, a full socket is "try again", a dead one fails.
@Suite("TLS records on the connection's own socket I/O")
struct TLSRecordIOTests {
    /// A connected pair of stream sockets: `ours` is the connection's, `peer` the server's.
    final class Pair {
        let ours: Int32
        var peer: Int32
        let io: UnsafeMutablePointer<mw_tls_io_state>
        /// The BIOs made on `ours`, freed before `io` (their buffers go back to it).
        private var bios: [OpaquePointer] = []

        init(sendBuffer: Int32? = nil) throws {
            var fds: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
            ours = fds[0]
            peer = fds[1]
            if var size = sendBuffer {
                _ = setsockopt(ours, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
            io = .allocate(capacity: 1)
            io.initialize(to: mw_tls_io_state())
            io.pointee.enabled = 1
        }

        /// A reader or writer BIO on `ours`, counted in `io`.
        func reader() throws -> OpaquePointer {
            let bio = try #require(mw_tls_new_reader(io, ours))
            bios.append(bio)
            return bio
        }

        func writer() throws -> OpaquePointer {
            let bio = try #require(mw_tls_new_writer(io, ours))
            bios.append(bio)
            return bio
        }

        /// Frees one of them now (its connection is gone).
        func free(_ bio: OpaquePointer) {
            bios.removeAll { $0 == bio }
            BIO_free(bio)
        }

        deinit {
            for bio in bios { BIO_free(bio) }
            close(ours)
            if peer >= 0 { close(peer) }
            mw_tls_io_release(io)
            io.deallocate()
        }

        /// Bytes the socket holds for `ours` to read, without taking them.
        var waitingForUs: Int {
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            return max(0, recv(ours, &buffer, buffer.count, Int32(MSG_PEEK | MSG_DONTWAIT)))
        }

        func peerSends(_ bytes: [UInt8]) { #expect(send(peer, bytes, bytes.count, 0) == bytes.count) }

        func peerReceivesAll() -> [UInt8] {
            var all: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = recv(peer, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if n <= 0 { return all }
                all += buffer[..<n]
            }
        }

        var counts: mw_tls_io_counts {
            mw_tls_io_counts(connections: 0, records_buffered: io.pointee.records, sends: io.pointee.flushes,
                             receives: io.pointee.receives, peeks: io.pointee.peeks)
        }
    }

    /// A TLS record: application data, TLS 1.2's version, `body`.
    static func record(_ body: [UInt8]) -> [UInt8] {
        [0x17, 0x03, 0x03, UInt8(body.count >> 8), UInt8(body.count & 0xFF)] + body
    }

    static func body(_ count: Int, seed: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) } }

    /// OpenSSL's side: asks for the 5-byte header, then for the body it announces, and keeps what it has between calls.
    struct OpenSSLReader {
        var have: [UInt8] = []
        var ended = false

        /// The next whole record, or nil when the BIO says to try again (or the stream ended).
        mutating func next(from bio: OpaquePointer) -> [UInt8]? {
            while true {
                let wanted = have.count < 5 ? 5 - have.count : 5 + (Int(have[3]) << 8 | Int(have[4])) - have.count
                if wanted == 0 {
                    defer { have = [] }
                    return have
                }
                var buffer = [UInt8](repeating: 0, count: wanted)
                let n = BIO_read(bio, &buffer, Int32(wanted))
                if n <= 0 {
                    ended = n == 0 && BIO_ctrl(bio, BIO_CTRL_EOF, 0, nil) == 1
                    if !ended { #expect(BIO_test_flags(bio, BIO_FLAGS_SHOULD_RETRY) != 0, "a read that failed without a reason") }
                    return nil
                }
                #expect(Int(n) <= wanted)
                have += buffer[..<Int(n)]
            }
        }
    }

    @Test func twoRecordsWaiting_theFirstIsTaken_theSecondStaysInTheSocket_oneLookServesBoth() throws {
        let pair = try Pair()
        defer { withExtendedLifetime(pair) {} }
        let reader = try pair.reader()
        let first = Self.record(Self.body(99, seed: 1)), second = Self.record(Self.body(140, seed: 2))
        pair.peerSends(first + second)
        var openssl = OpenSSLReader()
        #expect(openssl.next(from: reader) == first)
        #expect(pair.waitingForUs == second.count, "bytes of the next record were taken from the socket")
        #expect(openssl.next(from: reader) == second)
        #expect(pair.waitingForUs == 0)
        #expect(pair.counts.receives == 2, "one recv per record")
        #expect(pair.counts.peeks == 1, "one look served both records")
        #expect(openssl.next(from: reader) == nil)
        #expect(!openssl.ended)
    }

    /// Records arriving in pieces of every size (a header split, a body split, a record's tail with the next one's
    /// start): OpenSSL gets exactly the bytes sent, and after each record it completes the socket still holds every
    /// byte sent after that record.
    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 11, 64, 103, 1000])
    func recordsInPieces_areReadWhole_andNothingPastTheRecordIsTaken(piece: Int) throws {
        let pair = try Pair()
        defer { withExtendedLifetime(pair) {} }
        let reader = try pair.reader()
        let records = (0..<12).map { Self.record(Self.body([0, 1, 17, 99, 300, 1400][$0 % 6], seed: $0)) }
        let stream = records.flatMap { $0 }
        var openssl = OpenSSLReader()
        var read: [[UInt8]] = []
        var sent = 0
        while sent < stream.count {
            let end = min(stream.count, sent + piece)
            pair.peerSends(Array(stream[sent..<end]))
            sent = end
            while let record = openssl.next(from: reader) {
                read.append(record)
                let completed = read.reduce(0) { $0 + $1.count }
                #expect(pair.waitingForUs == sent - completed, "after record \(read.count) the socket lost bytes of later ones")
            }
        }
        #expect(read == records)
        #expect(pair.counts.receives <= pair.counts.peeks + UInt(records.count) * 2)
    }

    @Test func thePeerClosing_isTheEndOfTheStream() throws {
        let pair = try Pair()
        defer { withExtendedLifetime(pair) {} }
        let reader = try pair.reader()
        let only = Self.record(Self.body(20, seed: 3))
        pair.peerSends(only)
        shutdown(pair.peer, Int32(SHUT_WR))
        var openssl = OpenSSLReader()
        #expect(openssl.next(from: reader) == only)
        #expect(openssl.next(from: reader) == nil)
        #expect(openssl.ended)
    }

    @Test func writes_waitForTheFlush_thenLeaveInOrder_inOneSend() throws {
        let pair = try Pair()
        defer { withExtendedLifetime(pair) {} }
        let writer = try pair.writer()
        let headers = Self.record(Self.body(117, seed: 4)), data = Self.record(Self.body(576, seed: 5))
        #expect(BIO_write(writer, headers, Int32(headers.count)) == Int32(headers.count))
        #expect(BIO_write(writer, data, Int32(data.count)) == Int32(data.count))
        #expect(pair.peerReceivesAll().isEmpty, "a record left before the flush")
        var waiting = [Int32](repeating: -1, count: 4)
        #expect(mw_tls_flush(pair.io, &waiting, 4) == 0)
        #expect(pair.peerReceivesAll() == headers + data)
        #expect(pair.counts.sends == 1)
        #expect(pair.counts.records_buffered == 2)
        #expect(mw_tls_flush(pair.io, &waiting, 4) == 0)
        #expect(pair.counts.sends == 1, "an empty buffer was sent")
    }

    /// The socket's send buffer full and the peer not reading: the flush reports the socket as waiting, a record the
    /// buffer cannot take is "try again"; once the peer reads, everything arrives, in order.
    @Test func aFullSocket_isTryAgain_andNothingIsLostOrReordered() throws {
        let pair = try Pair(sendBuffer: 4096)
        defer { withExtendedLifetime(pair) {} }
        let writer = try pair.writer()
        var written: [UInt8] = []
        var refused = false
        var waiting = [Int32](repeating: -1, count: 4)
        for index in 0..<400 where !refused {
            let record = Self.record(Self.body(1500, seed: index))
            let n = BIO_write(writer, record, Int32(record.count))
            if n == Int32(record.count) {
                written += record
                if index % 10 == 9 { _ = mw_tls_flush(pair.io, &waiting, 4) }
            } else {
                #expect(n == -1)
                #expect(BIO_test_flags(writer, BIO_FLAGS_SHOULD_RETRY) != 0, "a full socket must be 'try again'")
                refused = true
            }
        }
        #expect(refused, "400 records fit in a socket the peer does not read")
        #expect(mw_tls_flush(pair.io, &waiting, 4) == 1)
        #expect(waiting[0] == pair.ours)
        var received: [UInt8] = []
        for _ in 0..<10_000 where received.count < written.count {
            received += pair.peerReceivesAll()
            _ = mw_tls_flush(pair.io, &waiting, 4)
        }
        #expect(received.count == written.count)
        #expect(received == written)
    }

    /// A dead peer: the flush fails, and later writes are dropped rather than refused (as a socket takes writes until
    /// it has seen the reset): failing them failed the whole HTTP/2 session, answered and refused streams alike.
    @Test func aDeadPeer_failsTheFlush_andLaterWritesAreDropped() throws {
        let pair = try Pair()
        defer { withExtendedLifetime(pair) {} }
        let writer = try pair.writer()
        close(pair.peer)
        pair.peer = -1
        let record = Self.record(Self.body(50, seed: 6))
        #expect(BIO_write(writer, record, Int32(record.count)) == Int32(record.count))
        #expect(mw_tls_flush_one(writer) == -1)
        let sends = pair.counts.sends
        #expect(BIO_write(writer, record, Int32(record.count)) == Int32(record.count))
        #expect(BIO_test_flags(writer, BIO_FLAGS_SHOULD_RETRY) == 0, "a dead connection must not wait")
        #expect(BIO_ctrl(writer, BIO_CTRL_WPENDING, 0, nil) == 0, "a dead connection kept bytes")
        #expect(mw_tls_flush_one(writer) == -1)
        #expect(pair.counts.sends == sends, "a dead connection was written to again")
    }

    /// A connection that is gone leaves its buffers to the next one (nginx's GOAWAY every 100 requests opens a
    /// connection every few milliseconds under load: without this, the heap grew by 6 MiB in a drain).
    @Test func aGoneConnectionsBuffers_serveTheNextOne() throws {
        let pair = try Pair()
        defer { withExtendedLifetime(pair) {} }
        let record = Self.record(Self.body(40, seed: 7))
        let (first, firstReader) = (try pair.writer(), try pair.reader())
        #expect(BIO_write(first, record, Int32(record.count)) == Int32(record.count))
        pair.peerSends(record)
        var openssl = OpenSSLReader()
        #expect(openssl.next(from: firstReader) == record)
        pair.free(first)
        pair.free(firstReader)
        #expect(pair.io.pointee.spare_writes.count == 1)
        #expect(pair.io.pointee.spare_looks.count == 1)
        #expect(pair.io.pointee.spare_records.count == 1)
        let second = try pair.writer()
        #expect(BIO_write(second, record, Int32(record.count)) == Int32(record.count))
        #expect(pair.io.pointee.spare_writes.count == 0, "the new connection allocated a buffer of its own")
    }
}
