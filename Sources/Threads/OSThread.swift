import Glibc

/// A detached, named operating-system thread running one closure: for the loops that must own a thread because
/// they block in C (libcurl's `curl_multi_poll`, libpq's socket wait). What Foundation's `Thread` did here, without
/// linking Foundation (and its ICU data) into the daemon.
public enum OSThread {
    /// Starts `body` on a new thread named `name` (the kernel keeps 15 bytes of it, as `top -H` shows).
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        _ = create(name: name, detached: true, body)
    }

    /// Starts `body` on a new thread that `Joinable.join()` waits for, to the end of the thread itself (what it
    /// releases as its closure goes, and the thread-exit cleanup of the C libraries it used).
    public static func startJoinable(name: String, _ body: @escaping @Sendable () -> Void) -> Joinable {
        Joinable(thread: create(name: name, detached: false, body))
    }

    /// A started thread not yet joined. Join it once.
    public struct Joinable: @unchecked Sendable {
        fileprivate let thread: pthread_t

        /// Waits until the thread has exited. From the thread itself it returns at once (it cannot wait for itself).
        public func join() {
            guard pthread_equal(thread, pthread_self()) == 0 else { return }
            _ = pthread_join(thread, nil)
        }
    }

    private static func create(name: String, detached: Bool, _ body: @escaping @Sendable () -> Void) -> pthread_t {
        let start = Unmanaged.passRetained(ThreadStart(name: name, body: body)).toOpaque()
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(detached ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE))
        let status = pthread_create(&thread, &attributes, runThreadStart, start)
        pthread_attr_destroy(&attributes)
        precondition(status == 0, "pthread_create failed (\(status)): the process is out of threads or memory")
        return thread
    }
}

/// What a new thread runs; owned by the thread from its first instruction.
private final class ThreadStart: Sendable {
    let name: String
    let body: @Sendable () -> Void

    init(name: String, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }

    func run() {
        // `pthread_setname_np` is not visible to Swift here (a _GNU_SOURCE declaration); the kernel's own file is.
        let fd = open("/proc/thread-self/comm", O_WRONLY)
        if fd >= 0 {
            var bytes = Array(name.utf8.prefix(15))
            _ = write(fd, &bytes, bytes.count)
            close(fd)
        }
        body()
    }
}

private func runThreadStart(_ raw: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    Unmanaged<ThreadStart>.fromOpaque(raw!).takeRetainedValue().run()
    return nil
}
