import Synchronization

/// A flag several rounds of a job share.
final class SharedFlag: Sendable {
    private let value = Mutex(false)

    /// Sets the flag; returns what it was.
    @discardableResult
    func set(_ new: Bool) -> Bool { value.withLock { old in defer { old = new }; return old } }

    /// The flag's value.
    var isSet: Bool { value.withLock { $0 } }
}
