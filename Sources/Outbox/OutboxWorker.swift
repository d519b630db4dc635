import FCM
import Foundation
import Logging
import Metrics
import Postgres

/// Settings of the delivery pipeline (SPEC §3, §5).
public struct OutboxWorkerConfiguration: Sendable {
    public var batchSize = 100
    public var maxInFlight = 100
    public var pollInterval = Duration.seconds(1)
    public var lease = Duration.seconds(60)
    public var maxAttempts = 10
    public var eventMaxAge = Duration.seconds(24 * 3600)
    /// Concurrent claim→send→complete loops, so SQL of one batch overlaps sends of another.
    public var lanes = 4
    public var backoff = Backoff()
    /// Identifies this process in `"leasedBy"` (host:pid).
    public var workerId = "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier)"

    public init() {}
}

/// The delivery pipeline: claims due outbox events, fans them out to devices, sends, and
/// writes the outcomes. Runs until `stop` is requested, then finishes or releases its work.
public final class OutboxWorker: Sendable {
    let store: OutboxStore
    let sender: any PushSender
    let configuration: OutboxWorkerConfiguration
    let logger: Logger
    let wake: WakeSignal
    let stop: StopSignal
    let inFlight: AsyncSemaphore
    let metrics: PipelineMetrics
    let onProgress: @Sendable () -> Void

    public init(client: PostgresClient, sender: any PushSender, configuration: OutboxWorkerConfiguration, logger: Logger,
                metrics: MetricsRegistry, wake: WakeSignal = WakeSignal(), stop: StopSignal = StopSignal(),
                onProgress: @escaping @Sendable () -> Void = {}) {
        self.store = OutboxStore(client: client)
        self.sender = sender
        self.configuration = configuration
        self.logger = logger
        self.wake = wake
        self.stop = stop
        self.inFlight = AsyncSemaphore(configuration.maxInFlight)
        self.metrics = PipelineMetrics(metrics)
        self.onProgress = onProgress
    }

    /// Runs the lanes until a stop is requested and in-flight work is finished or released.
    public func run() async {
        logger.info("outbox worker started", metadata: [
            "worker.id": configuration.workerId, "outbox.batch_size": "\(configuration.batchSize)",
            "outbox.lanes": "\(configuration.lanes)", "fcm.max_in_flight": "\(configuration.maxInFlight)",
        ])
        await withTaskGroup(of: Void.self) { group in
            for lane in 0..<max(1, configuration.lanes) {
                group.addTask { await self.runLane(lane) }
            }
        }
        logger.info("outbox worker stopped")
    }

    /// Processes due events until none is left (tests, `drain`). Returns the number of events claimed.
    @discardableResult
    public func drain() async throws -> Int {
        var total = 0
        while true {
            let claimed = try await processOneBatch()
            if claimed == 0 { return total }
            total += claimed
        }
    }

    private func runLane(_ lane: Int) async {
        var failures = 0
        while !stop.isRequested {
            onProgress()
            let seen = wake.current
            do {
                let claimed = try await processOneBatch { full in
                    // A full batch means more may be waiting: let another lane claim in parallel.
                    if full { self.wake.wake() }
                }
                failures = 0
                if claimed < configuration.batchSize {
                    await wake.wait(after: seen, timeout: configuration.pollInterval)
                }
            } catch {
                failures += 1
                // Database down or failing over: keep polling, slower, without crashing.
                let delay = min(Duration.seconds(5), Duration.milliseconds(100) * (1 << min(failures, 6)))
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("outbox lane failed; retrying", metadata: ["error": "\(error)", "outbox.lane": "\(lane)"])
                }
                await wake.wait(after: wake.current, timeout: delay)
            }
        }
    }

    /// Claims one batch and takes it to completion. Returns how many events it claimed.
    func processOneBatch(afterClaim: (Bool) -> Void = { _ in }) async throws -> Int {
        guard !stop.isRequested else { return 0 }
        let token = UUID()
        let events = try await store.claim(limit: configuration.batchSize, workerId: configuration.workerId, token: token,
                                           lease: configuration.lease, maxAge: configuration.eventMaxAge)
        afterClaim(events.count == configuration.batchSize)
        guard !events.isEmpty else { return 0 }
        do {
            try await process(events, token: token)
        } catch {
            // The leases expire by themselves; releasing early makes the events due at once.
            try? await store.release(eventIds: events.map(\.id), token: token)
            throw error
        }
        return events.count
    }
}
