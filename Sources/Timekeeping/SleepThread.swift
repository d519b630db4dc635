import Glibc

/// Blocks the calling thread for `duration` (threads that wait in C anyway: the listener, reconnects, migrations).
public func sleepThread(for duration: Duration) {
    let (seconds, attoseconds) = duration.components
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}
