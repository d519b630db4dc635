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

    /// Releases every socket corked for `tls`'s client: an HTTP/1.1 server takes a connection per request, so there may
    /// be hundreds.
    static func releaseAll(_ tls: UnsafeMutablePointer<mw_tls_state>) {
        mw_release_corked(tls)
    }
}
