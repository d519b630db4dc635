import CCurl
import Foundation
@testable import HTTP
import TestSupport
import Testing

/// The write coalescing of the HTTP client, on a real loopback TCP connection: what is written to a
/// corked socket stays in its send queue until the release, and leaves at once when released.
@Suite("Write coalescing on a TCP socket")
struct TransferSocketsTests {
    /// A connected pair: the client side (given to the socket-creation callback, as libcurl gives its sockets, so it is
    /// corked and in `tls`'s set) and the accepted side.
    static func connectedPair(_ tls: UnsafeMutablePointer<mw_tls_state>) throws -> (client: Int32, server: Int32, listener: LoopbackSocket) {
        let listener = LoopbackSocket()
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        _ = mw_socket_created(tls, client, CURLSOCKTYPE_IPCXN)
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
        let tls = UnsafeMutablePointer<mw_tls_state>.allocate(capacity: 1)
        tls.initialize(to: mw_tls_state())
        tls.pointee.cork = 1
        let (client, server, listener) = try Self.connectedPair(tls)
        defer { close(client); close(server); listener.close(); mw_tls_state_release(tls); tls.deallocate() }
        // Two frames' worth, as libcurl writes a HEADERS and a DATA frame.
        #expect(send(client, "HEADERS", 7, 0) == 7)
        #expect(send(client, "DATA", 4, 0) == 4)
        #expect(Self.readable(server) == 0, "a corked socket sent before the release")
        TransferSockets.releaseAll(tls)
        #expect(Self.readable(server) == 11)
        // Corked again: the next turn's writes wait for the next release.
        #expect(send(client, "NEXT", 4, 0) == 4)
        #expect(Self.readable(server) == 0)
        TransferSockets.releaseAll(tls)
        #expect(Self.readable(server) == 4)
    }

    /// An HTTP/1.1 server takes a connection per request, so a turn may have written to hundreds of sockets: every one is
    /// released (before issue 55's last round, only the first 64 were: the rest waited for the kernel's 200 ms cork limit,
    /// 1,837 sends/s at 200 in flight against a 50 ms HTTP/1.1 server, 3,317 after).
    @Test func release_reachesEverySocketOfTheMulti() throws {
        let transfers = 80
        try Self.withTransfers(transfers) { multi, tls, accepted in
            TransferSockets.releaseAll(tls)
            let arrived = accepted.filter { Self.readable($0) > 0 }.count
            #expect(arrived == transfers, "requests on \(transfers - arrived) connection(s) were left corked")
        }
    }

    /// Sockets whose descriptors are past FD_SETSIZE (1,024) are corked and released like the rest, and each leaves the
    /// client's set when libcurl closes it. Before, the set came from `curl_multi_fdset`, which sees no descriptor past
    /// 1,024 (so those sockets were left uncorked), and which on Debian 13's libcurl 8.14 aborts the process when a
    /// connection in shutdown has such a descriptor (curl PR 19439). A daemon's `LimitNOFILE` is 8,192.
    @Test func socketsPastFD_SETSIZE_areCorkedReleasedAndForgottenWhenClosed() throws {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        try #require(limit.rlim_max >= 1200, "this test needs 1,200 descriptors; the hard limit allows \(limit.rlim_max)")
        let saved = limit
        limit.rlim_cur = max(limit.rlim_cur, 1200)
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        // Every free descriptor below 1,024 is taken, so the transfers' sockets come after it.
        var fillers: [Int32] = []
        while case let fd = dup(0), fd >= 0 {
            fillers.append(fd)
            if fd >= 1024 { break }
        }
        defer {
            for fd in fillers { close(fd) }
            var restored = saved
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &restored)
        }
        let transfers = 8
        try Self.withTransfers(transfers) { multi, tls, accepted in
            let early = accepted.filter { Self.readable($0) > 0 }.count
            #expect(early == 0, "\(early) request(s) left before the release: their sockets were not corked")
            let corked = (0..<Int(mw_corked_count(tls))).map { tls.pointee.corked[$0].fd }
            #expect(corked.count == transfers)
            try #require(corked.contains { $0 >= 1024 }, "no transfer socket past 1,024: \(corked)")
            TransferSockets.releaseAll(tls)
            #expect(accepted.filter { Self.readable($0) > 0 }.count == transfers)
            // The server answers and closes; libcurl closes each connection (FORBID_REUSE), and the set empties.
            for fd in accepted { _ = send(fd, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", 46, 0) }
            var running: Int32 = 1
            for _ in 0..<500 where running > 0 {
                curl_multi_perform(multi, &running)
                TransferSockets.releaseAll(tls)
                var ready: Int32 = 0
                curl_multi_wait(multi, nil, 0, 5, &ready)
            }
            #expect(running == 0)
            #expect(mw_corked_count(tls) == 0, "closed sockets still in the set: \(mw_corked_count(tls))")
        }
    }

    /// Debian 12's libcurl 7.88 closes a socket that never finished connecting (here: its connect timed out against a
    /// listener whose queue is full) without the close callback (curl issue 11439, fixed in 8.2.0), and the kernel gives
    /// its number to the next socket opened: the client drops the entry at its next release (the inode differs, or the
    /// number is closed) and never corks that other socket, which could be a PostgreSQL connection.
    @Test func aSocketLibcurlClosedUnseen_isDroppedAtTheNextRelease_andTheNextSocketWithItsNumberIsNotTouched() throws {
        // A listener that takes no connection: its accept queue (backlog 0) is full after the first, and the kernel
        // drops the SYNs after it, so the transfer's connect stays in progress.
        let listener = LoopbackSocket()
        _ = listen(listener.fd, 0)
        let fillers = (0..<2).map { _ in socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0) }
        for filler in fillers { _ = withIPv4Address(port: listener.port) { connect(filler, $0, $1) } }
        usleep(50_000)
        let multi = try #require(curl_multi_init())
        let tls = UnsafeMutablePointer<mw_tls_state>.allocate(capacity: 1)
        tls.initialize(to: mw_tls_state())
        tls.pointee.cork = 1
        let easy = try #require(curl_easy_init())
        var other: Int32 = -1
        defer {
            curl_multi_remove_handle(multi, easy)
            curl_easy_cleanup(easy)
            curl_multi_cleanup(multi)
            mw_tls_state_release(tls)
            tls.deallocate()
            if other >= 0 { close(other) }
            for filler in fillers { close(filler) }
            listener.close()
        }
        #expect(mw_easy_setopt_cstr(easy, CURLOPT_URL, "http://127.0.0.1:\(listener.port)/unanswered") == CURLE_OK)
        #expect(mw_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, 300) == CURLE_OK)
        #expect(TransferSockets.install(on: easy, tls: tls) == CURLE_OK)
        #expect(curl_multi_add_handle(multi, easy) == CURLM_OK)
        var running: Int32 = 1
        var opened: [Int32] = []
        for _ in 0..<500 where running > 0 {
            curl_multi_perform(multi, &running)
            opened += (0..<Int(mw_corked_count(tls))).map { tls.pointee.corked[$0].fd }
            var ready: Int32 = 0
            curl_multi_wait(multi, nil, 0, 5, &ready)
        }
        try #require(running == 0)
        try #require(!opened.isEmpty, "libcurl opened no socket")
        // The next socket opened takes the lowest free number: most often the refused socket's.
        other = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        TransferSockets.releaseAll(tls)
        #expect(mw_corked_count(tls) == 0, "an entry outlived its socket: \(opened)")
        var cork: Int32 = -1
        var size = socklen_t(MemoryLayout<Int32>.size)
        #expect(getsockopt(other, Int32(IPPROTO_TCP), TCP_CORK, &cork, &size) == 0)
        #expect(cork == 0, "socket \(other) (the refused one's number: \(opened.contains(other))) was corked")
    }

    /// `transfers` plain-HTTP requests in one multi handle, each on its own corked connection to a loopback listener
    /// that accepts but does not answer; `body` gets the multi handle, the client state and the accepted sockets once
    /// every request has been written (to its corked socket).
    static func withTransfers(_ transfers: Int,
                              _ body: (UnsafeMutableRawPointer, UnsafeMutablePointer<mw_tls_state>, [Int32]) throws -> Void) throws {
        let listener = LoopbackSocket()
        _ = listen(listener.fd, Int32(transfers * 2))
        _ = fcntl(listener.fd, F_SETFL, fcntl(listener.fd, F_GETFL) | O_NONBLOCK)
        let multi = try #require(curl_multi_init())
        let tls = UnsafeMutablePointer<mw_tls_state>.allocate(capacity: 1)
        tls.initialize(to: mw_tls_state())
        tls.pointee.cork = 1
        var easies: [UnsafeMutableRawPointer] = []
        var accepted: [Int32] = []
        defer {
            for easy in easies { curl_multi_remove_handle(multi, easy); curl_easy_cleanup(easy) }
            curl_multi_cleanup(multi)
            mw_tls_state_release(tls)
            tls.deallocate()
            for fd in accepted { close(fd) }
            listener.close()
        }
        for index in 0..<transfers {
            let easy = try #require(curl_easy_init())
            easies.append(easy)
            #expect(mw_easy_setopt_cstr(easy, CURLOPT_URL, "http://127.0.0.1:\(listener.port)/\(index)") == CURLE_OK)
            #expect(mw_easy_setopt_long(easy, CURLOPT_FORBID_REUSE, 1) == CURLE_OK)
            #expect(TransferSockets.install(on: easy, tls: tls) == CURLE_OK)
            #expect(curl_multi_add_handle(multi, easy) == CURLM_OK)
        }
        // Turns until every request is written (to its corked socket) and every connection accepted.
        var running: Int32 = 0
        for _ in 0..<500 {
            curl_multi_perform(multi, &running)
            while case let fd = accept(listener.fd, nil, nil), fd >= 0 { accepted.append(fd) }
            let written = easies.filter { easy in
                var size = 0
                return mw_easy_getinfo_long(easy, CURLINFO_REQUEST_SIZE, &size) == CURLE_OK && size > 0
            }.count
            if written == transfers && accepted.count == transfers { break }
            var ready: Int32 = 0
            curl_multi_wait(multi, nil, 0, 5, &ready)
        }
        try #require(accepted.count == transfers)
        try body(multi, tls, accepted)
    }
}
