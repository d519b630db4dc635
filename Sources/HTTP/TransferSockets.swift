import CCurl
import Glibc

/// What the client does to the TCP sockets libcurl opens for it: a stall bound, and holding back
/// what a turn of the driver writes so it leaves as one segment.
///
/// Debian 12's libcurl 7.88 writes every HTTP/2 frame with its own `SSL_write`, so one FCM send is a
/// HEADERS segment and a DATA segment, and a turn that starts thirty sends writes sixty segments
/// (docs/benchmark.md, issue 24's second round: worker 51.8 -> 45.1 µs, nginx 17.8 -> 12.7 µs per
/// delivery with the cork). 8.14 writes one per send; the cork still joins a turn's sends (not
/// measured there). Each segment is a trip through the TCP stack and a wake-up of the peer. So
/// each socket is corked (TCP_CORK) when it is created, and after every turn, before the driver sleeps, the sockets of
/// the transfers in progress are uncorked and corked again: the turn's frames leave together and
/// nothing a transfer wrote waits beyond the turn that wrote it. The sockets come from libcurl at
/// each flush (`curl_multi_fdset`), never from a list of our own, so a descriptor libcurl closed
/// and the kernel gave to someone else is never touched. A connection with no transfer left (its
/// last frame an RST_STREAM or a WINDOW_UPDATE) is released by the kernel's cork limit (200 ms).
enum TransferSockets {
    /// Installs the socket-creation callback (`mw_socket_created` in the CCurl shim): TCP_USER_TIMEOUT and TCP_CORK as
    /// `tls` says.
    static func install(on easy: UnsafeMutableRawPointer, tls: UnsafeMutablePointer<mw_tls_state>) -> CURLcode {
        mw_easy_setopt_sockopt(easy, tls)
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
