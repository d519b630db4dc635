extension StopSignal {
    /// The result of `body`, or nil as soon as a stop is requested (`body` then finishes unobserved): for work that
    /// cannot be cancelled (a libpq call blocked on a silent database) and must not hold a stop up.
    public func unlessStopped<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        let first = FirstAnswer<Result<T, any Error>?>()
        Task {
            let result: Result<T, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            first.give(result)
        }
        let watcher = Task {
            await wait()
            first.give(nil)
        }
        defer { watcher.cancel() }
        return try await first.value()?.get()
    }
}
