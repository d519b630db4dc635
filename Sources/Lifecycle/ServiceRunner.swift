import FoundationEssentials
import Glibc

/// Runs the daemon's services until SIGTERM/SIGINT, then stops them in reverse order
/// (swift-service-lifecycle's `ServiceGroup`): the last service is asked to stop first, and each
/// earlier one once every later one has returned, so what the loops depend on (the health
/// endpoint, LISTEN) stays up until they are done. Every stop shares the deadline the signal set.
public final class ServiceRunner: Sendable {
    /// Requested by a signal, or by a service that failed: the whole group winds down.
    public let shutdown: StopSignal
    private let grace: Duration
    private let onFailure: @Sendable (any Service, any Error) -> Void
    /// Kept for the runner's lifetime: dropping it stops watching the signals.
    private let signals: SignalWatcher
    /// SIGHUP, the habit of a reload: nothing is reloaded (the configuration is read at start), and its default action
    /// would end the process at once, with sends in flight and outcomes unwritten, as an exit systemd does not restart.
    private let hangups: SignalWatcher

    /// Starts watching SIGTERM and SIGINT at once (so a signal during start-up, e.g. while waiting
    /// for the database, already counts). `onSignal` runs first, with the signal's name; then the
    /// shutdown is requested with `grace` for the services to finish.
    public init(grace: Duration, onSignal: @escaping @Sendable (String) -> Void,
                onFailure: @escaping @Sendable (any Service, any Error) -> Void,
                onHangup: @escaping @Sendable () -> Void = {}) {
        let shutdown = StopSignal()
        self.shutdown = shutdown
        self.grace = grace
        self.onFailure = onFailure
        signals = SignalWatcher { name in
            onSignal(name)
            shutdown.request(grace: grace)
        }
        hangups = SignalWatcher(signals: [SIGHUP]) { _ in onHangup() }
    }

    /// Starts `services` in order and returns when the shutdown is complete.
    public func run(_ services: [any Service]) async {
        await runNested(services[...])
    }

    /// The first service runs beside the rest; it is stopped once the rest have returned
    /// (the innermost level waits for the shutdown request).
    private func runNested(_ services: ArraySlice<any Service>) async {
        guard let first = services.first else {
            await shutdown.wait()
            return
        }
        let stop = StopSignal()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.runOne(first, stop: stop) }
            await runNested(services.dropFirst())
            stop.request(deadline: shutdown.deadline ?? .now)
            await group.waitForAll()
        }
    }

    private func runOne(_ service: any Service, stop: StopSignal) async {
        do {
            try await service.run(until: stop)
        } catch {
            onFailure(service, error)
            shutdown.request(grace: grace)
        }
    }
}
