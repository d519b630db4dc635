import CCurl
import Glibc

/// What the client does to the TCP sockets libcurl opens for it: a stall bound (TCP_USER_TIMEOUT), and a cork
/// (TCP_CORK) released after every driver turn, so a turn's writes leave as one segment. Debian 12's libcurl 7.88 writes
/// each HTTP/2 frame on its own (docs/benchmark.md, "Issue 24, second round"); 8.14 writes one per send, which the cork
/// still joins (not measured there). The sockets to release are the client's own set (`mw_tls_state.corked`), kept by
/// libcurl's socket-creation and socket-close callbacks: exact, whatever the descriptor's number, and a descriptor the
/// kernel has given to someone else is never in it.
enum TransferSockets {
    /// Installs the socket callbacks (`mw_socket_created`, `mw_socket_closed` in the CCurl shim): TCP_USER_TIMEOUT and
    /// TCP_CORK as `tls` says, and its set of corked sockets kept.
    static func install(on easy: UnsafeMutableRawPointer, tls: UnsafeMutablePointer<mw_tls_state>) -> CURLcode {
        mw_easy_setopt_sockopt(easy, tls)
    }

    /// Holds what is written to `fd` until the next `release` (or the kernel's 200 ms limit, which frees a connection
    /// whose transfers are gone and whose last frame was an RST_STREAM or a WINDOW_UPDATE).
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

    /// Releases every socket corked for `tls`'s client: an HTTP/1.1 server takes a connection per request, so there may
    /// be hundreds.
    static func releaseAll(_ tls: UnsafeMutablePointer<mw_tls_state>) {
        mw_release_corked(tls)
    }

    fileprivate static func setFlag(_ fd: Int32, _ option: Int32, _ value: UInt32) {
        var value = value
        _ = setsockopt(fd, Int32(IPPROTO_TCP), option, &value, socklen_t(MemoryLayout<UInt32>.size))
    }
}
