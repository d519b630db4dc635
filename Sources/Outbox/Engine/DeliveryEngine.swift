import FoundationEssentials
import Lifecycle
import Logging
import Metrics
import Postgres
import Push
import Timekeeping

/// Settings of the delivery engine.
public struct DeliveryEngineConfiguration: Sendable {
    /// Most events one claim takes.
    public var batchSize = 100
    /// Sends held at once, each from its start until its outcome is written (`MAX_IN_FLIGHT`): sends in
    /// flight plus answered-but-unwritten outcomes. So the outcomes not yet written never number more, and a `kill -9`
    /// re-sends at most this many.
    public var maxInFlight = 100
    /// Of those, the most on the wire at once (nil: all of them). Below `maxInFlight`, sending goes on while the last
    /// answers' outcomes are written instead of waiting for each write (the daemon sends at most half).
    public var maxSending: Int?
    /// The claimer claims while queued + held deliveries are below the sends on the wire × `highWaterFactor`.
    public var highWaterFactor = 4

    /// Sends on the wire at once: `maxSending`, within 1...`maxInFlight`.
    var sendingSlots: Int { min(max(1, maxInFlight), max(1, maxSending ?? maxInFlight)) }
    /// Claim loops running side by side, so one claim's round trips overlap another's.
    public var claimers = 2
    public var pollInterval = Duration.seconds(1)
    /// How often a claim loop says it is alive (`onProgress`) while it waits: for room (sends FCM has not answered, or
    /// outcomes a database that is down cannot take), for a wake-up (an idle queue, however long `pollInterval`), for
    /// the database's answer to a claim. Well inside the daemon's stall limit (25 s), so waiting on a dependency is never
    /// taken for a wedged loop; a loop that stops turning (its actor stuck) still is.
    public var aliveEvery = Duration.seconds(5)
    public var lease = Duration.seconds(60)
    public var maxAttempts = 10
    public var eventMaxAge = Duration.seconds(24 * 3600)
    public var backoff = Backoff()
    /// Completer transactions start at most this often (from one's start to the next), so each carries what answered
    /// meanwhile; one starts at once when half the send slots' worth is waiting or sends are queued behind full slots.
    public var completerFlushInterval = Duration.milliseconds(10)
    /// Most items one completer transaction writes (its size, and so its time, stay bounded under any backlog).
    public var completerFlushCount = 512
    /// Identifies this process in `"leasedBy"` (host:pid).
    public var workerId = "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier)"

    public init() {}
}

/// The delivery pipeline as a stream, in the shape of River's producer → executor → completer:
/// the claimer claims as capacity frees up, each delivery is sent as soon as a slot is free and
/// frees it once its outcome is written (so sending keeps the database's pace), the completer writes
/// outcomes in bounded batches and settles each event when its last delivery is answered, and the
/// heartbeat keeps leases alive until outcomes are written. The bookkeeping is `EngineStateMachine`.
public final class DeliveryEngine: Service {
    let store: OutboxStore
    let sender: any PushSender
    let configuration: DeliveryEngineConfiguration
    let logger: Logger
    let wake: WakeSignal
    let metrics: PipelineMetrics
    let onProgress: @Sendable () -> Void

    public init(client: PostgresClient, sender: any PushSender, configuration: DeliveryEngineConfiguration, logger: Logger,
                metrics: MetricsRegistry, wake: WakeSignal = WakeSignal(),
                onProgress: @escaping @Sendable () -> Void = {}) {
        self.store = OutboxStore(client: client)
        self.sender = sender
        self.configuration = configuration
        self.logger = logger
        self.wake = wake
        self.metrics = PipelineMetrics(metrics)
        self.onProgress = onProgress
    }

    /// The engine's bookkeeping for `configuration`: `MAX_IN_FLIGHT` is the capacity (sends in flight plus unwritten
    /// outcomes), the slots are the sends on the wire, and claims stop at the slots × `highWaterFactor`.
    static func machine(for configuration: DeliveryEngineConfiguration) -> EngineStateMachine {
        EngineStateMachine(slots: configuration.sendingSlots, highWater: configuration.sendingSlots * configuration.highWaterFactor,
                           capacity: configuration.maxInFlight, backoff: configuration.backoff)
    }

    /// Runs until `stop` is requested; then sends nothing new, awaits the sends in flight (until the
    /// stop's deadline), records their outcomes and releases what was never sent.
    public func run(until stop: StopSignal) async {
        logger.info("delivery engine started", metadata: [
            "worker.id": configuration.workerId, "outbox.batch_size": "\(configuration.batchSize)",
            "fcm.max_in_flight": "\(configuration.maxInFlight)", "fcm.max_sending": "\(configuration.sendingSlots)",
        ])
        defer { logger.info("delivery engine stopped", metadata: ["outbox.claimed": "\(metrics.claimedTotal)"]) }
        // The stages around one event loop: the claimers and the writer send it events, the heartbeat asks it what to
        // renew and tells it what it renewed or lost; the loop starts the sends.
        let turn = WriteTurn()
        let writer = Completer(store: store, configuration: configuration, metrics: metrics, logger: logger, stop: stop, turn: turn,
                               claimerWake: wake)
        let machine = Self.machine(for: configuration)
        let engine = EngineLoop(machine: machine, sender: sender, writer: writer, stop: stop, margin: configuration.lease / 3,
                                unwrittenGauge: metrics.unwritten, windowGauge: metrics.window, onProgress: onProgress)
        let fanOut = DeliveryFanOut(client: store.client, settings: store.settings)
        let claimer = Claimer(store: store, fanOut: fanOut, configuration: configuration, metrics: metrics, logger: logger)
        let heartbeat = LeaseHeartbeat(store: store, engine: engine, turn: turn, configuration: configuration, logger: logger)
        // The heartbeat keeps leases until the writer has written the last outcome, so it stops after the writer.
        let heartbeatStop = StopSignal()

        async let written: Void = writer.run(written: { await engine.written($0) })
        async let heartbeats: Void = heartbeat.run(until: heartbeatStop)
        let claimLoops = (0..<max(1, configuration.claimers)).map { _ in
            ClaimLoop(claimer: claimer, engine: engine, wake: wake, configuration: configuration, logger: logger, onProgress: onProgress)
        }
        await withTaskGroup(of: Void.self) { watcher in
            // A stop wakes the claimers (and their waits for room) at once; the loop checks it before every send.
            watcher.addTask {
                await stop.wait()
                if stop.isRequested {
                    await engine.stop()
                    self.wake.wakeAll()
                }
            }
            try? await ConcurrentServices(claimLoops).run(until: stop)  // claim loops never throw
            watcher.cancelAll()
        }
        // Stop: nothing new is sent (queued work is released); sends in flight are awaited until the deadline, then
        // cancelled (their outcome is unknown: their deliveries keep their lease, FCM may have them). Every answered
        // outcome is written before the writer returns; the heartbeat keeps their leases until then.
        await engine.stop()
        sender.cancelWaiting()
        await engine.waitUntilNoSends(deadline: stop.deadline ?? .now)
        if await engine.sending > 0 {
            await engine.abandonInFlight()
            await engine.waitUntilNoSends(deadline: .now + .seconds(2))
        }
        await engine.abandonRemaining()
        writer.close()
        await written
        heartbeatStop.request(grace: .zero)
        await heartbeats
    }
}
