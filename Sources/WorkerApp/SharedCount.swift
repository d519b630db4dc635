import Synchronization

/// A count several rounds of a job share.
final class SharedCount: Sendable {
    private let value = Mutex(0)

    /// Reads or changes the count under its lock.
    func withLock<T>(_ body: (inout Int) -> T) -> T { value.withLock { body(&$0) } }
}
