import Synchronization

/// The first of several answers (the rest are dropped), awaited once: a race without polling, where the losing
/// side cannot be cancelled (a libpq call blocked on a silent database).
public final class FirstAnswer<Value: Sendable>: Sendable {
    private struct State {
        var answer: Value?
        var answered = false
        var waiter: CheckedContinuation<Value, Never>?
    }

    private let state = Mutex(State())

    public init() {}

    public func give(_ answer: Value) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, Never>? in
            guard !state.answered else { return nil }
            state.answered = true
            state.answer = answer
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: answer)
    }

    public func value() async -> Value {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value, Never>) in
            let ready = state.withLock { state -> Value? in
                guard state.answered else {
                    state.waiter = continuation
                    return nil
                }
                return state.answer
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
