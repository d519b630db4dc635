import Synchronization

/// What a test's callbacks and fakes saw, in order, from any thread: health reports, sends, statuses, events.
public final class Recorder<Element: Sendable>: Sendable {
    private let elements = Mutex<[Element]>([])

    public init() {}

    public func record(_ element: Element) {
        elements.withLock { $0.append(element) }
    }

    /// Everything recorded so far, oldest first.
    public var all: [Element] { elements.withLock { $0 } }

    public var last: Element? { elements.withLock { $0.last } }

    public var count: Int { elements.withLock { $0.count } }
}
