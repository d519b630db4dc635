import Health
import Lifecycle
import Logging
import Systemd

/// Pings the systemd watchdog at half its interval while every loop makes progress; returns at
/// once when systemd set no watchdog.
struct Watchdog: PeriodicJob {
    let liveness: Liveness
    let notifier: SystemdNotifier
    let logger: Logger
    /// Whether the stall was already reported (one critical line per stall, not one per round).
    private let warned = SharedFlag()

    func run(until stop: StopSignal) async {
        guard notifier.watchdogInterval != nil else { return }
        await runRounds(until: stop)
    }

    func runOnce(until stop: StopSignal) async throws {
        let stalled = liveness.stalled()
        if stalled.isEmpty {
            notifier.notify("WATCHDOG=1")
            warned.set(false)
        } else if !warned.set(true) {
            logger.critical("loops stalled; withholding watchdog pings", metadata: ["stalled": stalled.joined(separator: ",")])
        }
    }

    func rest(after round: Void?) async -> Duration { (notifier.watchdogInterval ?? .seconds(10)) / 2 }

    func roundFailed(_ error: any Error) {}
}
