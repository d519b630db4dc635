import Synchronization

/// A count several rounds of a job share.
final class SharedCount: Sendable {
    private let value = Mutex(0)

    /// Sets the count; returns what it was.
    @discardableResult
    func set(_ new: Int) -> Int { value.withLock { old in defer { old = new }; return old } }

    /// Adds one; returns the new count.
    func increment() -> Int { value.withLock { $0 += 1; return $0 } }
}
