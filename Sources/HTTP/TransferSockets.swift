import CCurl
import Glibc

/// What the client does to the TCP sockets libcurl opens for it: a stall bound (TCP_USER_TIMEOUT), and a cork
/// (TCP_CORK) released after every driver turn, so a turn's writes leave as one segment. Debian 12's libcurl 7.88 writes
/// each HTTP/2 frame on its own (docs/benchmark.md, "Issue 24, second round"); 8.14 writes one per send, which the cork
/// still joins (not measured there). The sockets to release come from libcurl (`curl_multi_fdset`), never from a list
/// of our own, so a descriptor the kernel has given to someone else is never touched.
enum TransferSockets {
    /// Installs the socket-creation callback (`mw_socket_created` in the CCurl shim): TCP_USER_TIMEOUT and TCP_CORK as
    /// `tls` says.
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

    /// Releases the sockets of `multi`'s transfers in progress, all of them: `scratch` grows to hold them (an HTTP/1.1
    /// server takes a connection per request, so there may be hundreds).
    static func releaseAll(of multi: UnsafeMutableRawPointer, scratch: inout [Int32]) {
        var count = sockets(of: multi, into: &scratch)
        if count > scratch.count {
            scratch = [Int32](repeating: -1, count: count * 2)
            count = min(sockets(of: multi, into: &scratch), scratch.count)
        }
        release(scratch[..<count])
    }

    private static func sockets(of multi: UnsafeMutableRawPointer, into scratch: inout [Int32]) -> Int {
        scratch.withUnsafeMutableBufferPointer { buffer in Int(mw_multi_sockets(multi, buffer.baseAddress, Int32(buffer.count))) }
    }

    fileprivate static func setFlag(_ fd: Int32, _ option: Int32, _ value: UInt32) {
        var value = value
        _ = setsockopt(fd, Int32(IPPROTO_TCP), option, &value, socklen_t(MemoryLayout<UInt32>.size))
    }
}
