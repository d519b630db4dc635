/// A long-running part of the daemon: a loop, a server, a listener (swift-service-lifecycle's
/// `Service`, with the graceful-shutdown trigger passed in rather than read from a task local).
///
/// `run(until:)` returns once `stop` is requested and the service has wound down within the
/// stop's deadline. A service whose work ends on its own may return earlier; the others go on.
/// A service never builds the pools or clients it uses: it receives them, and whoever built
/// them closes them after the runner returns.
public protocol Service: Sendable {
    /// Runs until `stop` is requested, then finishes what it owes (results, leases) and returns.
    func run(until stop: StopSignal) async throws
}

/// Services that start together and stop together, with one stop and so one deadline (the
/// delivery loops: the engine's grace must not wait for a slower sibling to stop first).
/// An error of one service is rethrown once all have returned.
public struct ConcurrentServices: Service {
    let services: [any Service]

    public init(_ services: [any Service]) { self.services = services }

    public func run(until stop: StopSignal) async throws {
        let failures = await withTaskGroup(of: (any Error)?.self) { group in
            for service in services {
                group.addTask {
                    do { try await service.run(until: stop) } catch { return error }
                    return nil
                }
            }
            return await group.reduce(into: [any Error]()) { if let error = $1 { $0.append(error) } }
        }
        if let first = failures.first { throw first }
    }
}
