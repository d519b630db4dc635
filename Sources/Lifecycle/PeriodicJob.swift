/// A job run round after round until stop (River's maintenance services: a job says what one round does and how long
/// to rest; one loop runs them all). `runOnce` does one round and returns what it did (tests call it directly);
/// `rest(after:)` is the pause before the next round (`nil`: the round failed); `roundFailed` reports an error, which
/// never ends the loop; `finished` gives up what the job holds once a stop ended it.
public protocol PeriodicJob: Service {
    associatedtype Round: Sendable
    /// True when a stop should cancel a round in progress (HTTP lookups and rate waits that end at once when
    /// cancelled); false when a round checks `stop` between its own steps and finishes what it started.
    var stopCancelsRound: Bool { get }
    func runOnce(until stop: StopSignal) async throws -> Round
    func rest(after round: Round?) async -> Duration
    func roundFailed(_ error: any Error)
    func finished() async
}

extension PeriodicJob {
    public var stopCancelsRound: Bool { false }
    public func finished() async {}

    public func run(until stop: StopSignal) async {
        await runRounds(until: stop)
    }

    /// The one loop: round, rest (ended early by a stop), round, … then `finished`.
    public func runRounds(until stop: StopSignal) async {
        while !stop.isRequested {
            var round: Round?
            do {
                round = stopCancelsRound ? try await cancellingOnStop(stop) : try await runOnce(until: stop)
            } catch {
                if !stop.isRequested { roundFailed(error) }
            }
            guard !stop.isRequested else { break }
            await stop.sleep(for: await rest(after: round))
        }
        await finished()
    }

    /// The round, cancelled the moment a stop is requested (it then ends with whatever error cancellation gives it).
    private func cancellingOnStop(_ stop: StopSignal) async throws -> Round {
        try await withThrowingTaskGroup(of: Round?.self) { group in
            group.addTask { try await runOnce(until: stop) }
            group.addTask {
                await stop.wait()
                return nil
            }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                if let round = next { return round }
                group.cancelAll()
            }
            throw CancellationError()
        }
    }
}
