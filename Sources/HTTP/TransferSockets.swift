import CCurl
import Glibc

/// What the client does to the TCP sockets libcurl opens for it: a stall bound, and holding back
/// what a turn of the driver writes so it leaves as one segment.
///
/// libcurl 7.88 writes every HTTP/2 frame with its own `SSL_write`, so one FCM send is a HEADERS
/// segment and a DATA segment, and a turn that starts thirty sends writes sixty segments. Each
/// segment is a trip through the TCP stack and a wake-up of the peer. So each socket is corked
/// (TCP_CORK) when it is created, and after every turn, before the driver sleeps, the sockets of
/// the transfers in progress are uncorked and corked again: the turn's frames leave together and
/// nothing a transfer wrote waits beyond the turn that wrote it. The sockets come from libcurl at
/// each flush (`curl_multi_fdset`), never from a list of our own, so a descriptor libcurl closed
/// and the kernel gave to someone else is never touched. A connection with no transfer left (its
/// last frame an RST_STREAM or a WINDOW_UPDATE) is released by the kernel's cork limit (200 ms).
enum TransferSockets {
    /// `select`'s limit: descriptors at or above it are invisible to `curl_multi_fdset`, so they are never corked.
    static let fdSetSize: Int32 = 1024

    /// Installs the socket-creation callback; `userTimeoutMs` (TCP_USER_TIMEOUT: data left unacknowledged
    /// this long drops the connection) and `coalesce` travel in its pointer argument.
    static func install(on easy: UnsafeMutableRawPointer, userTimeoutMs: UInt32, coalesce: Bool) -> CURLcode {
        let bits = UInt(userTimeoutMs) << 1 | (coalesce ? 1 : 0)
        return mw_easy_setopt_sockopt(easy, transferSocketCreated, UnsafeMutableRawPointer(bitPattern: bits))
    }

    /// Holds what is written to `fd` until the next `release` (or the kernel's 200 ms limit).
    static func cork(_ fd: Int32) {
        setFlag(fd, TCP_CORK, 1)
    }

    /// Sends what was written to each of `fds` since the last release, and holds later writes again.
    static func release(_ fds: some Sequence<Int32>) {
        for fd in fds {
            setFlag(fd, TCP_CORK, 0)
            setFlag(fd, TCP_CORK, 1)
        }
    }

    /// Releases the sockets of `multi`'s transfers in progress.
    static func releaseAll(of multi: UnsafeMutableRawPointer, scratch: inout [Int32]) {
        let count = scratch.withUnsafeMutableBufferPointer { buffer in
            Int(mw_multi_sockets(multi, buffer.baseAddress, Int32(buffer.count)))
        }
        release(scratch[..<count])
    }

    fileprivate static func setFlag(_ fd: Int32, _ option: Int32, _ value: UInt32) {
        var value = value
        _ = setsockopt(fd, Int32(IPPROTO_TCP), option, &value, socklen_t(MemoryLayout<UInt32>.size))
    }
}

/// CURLOPT_SOCKOPTFUNCTION: a new TCP socket, before it connects.
private func transferSocketCreated(_ clientp: UnsafeMutableRawPointer?, _ fd: curl_socket_t, _ purpose: curlsocktype) -> Int32 {
    let bits = UInt(bitPattern: clientp)
    let userTimeoutMs = UInt32(truncatingIfNeeded: bits >> 1)
    if userTimeoutMs > 0 { TransferSockets.setFlag(fd, TCP_USER_TIMEOUT, userTimeoutMs) }
    if bits & 1 == 1, purpose == CURLSOCKTYPE_IPCXN, fd < TransferSockets.fdSetSize { TransferSockets.cork(fd) }
    return Int32(CURL_SOCKOPT_OK)
}
