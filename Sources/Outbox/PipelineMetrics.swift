import Metrics

/// The pipeline's counters, looked up once (per-delivery code only increments).
struct PipelineMetrics: Sendable {
    /// `push_deliveries_total{result}` label values.
    enum DeliveryResultLabel: String, CaseIterable, Sendable {
        case sent, failed
        case tokenInvalid = "token_invalid"
        case retry
    }

    let registry: MetricsRegistry
    private let deliveries: [Counter]
    /// `push_outbox_processed_total` by the statuses a settlement writes, looked up once.
    private let processed: [OutboxStatus: Counter]
    /// `push_outbox_claimed_total`: events claimed (an event is claimed again for each attempt).
    let claimed: Counter
    static let claimedName = "push_outbox_claimed_total"
    /// Events claimed so far.
    var claimedTotal: Int { Int(registry.value(Self.claimedName) ?? 0) }
    /// `push_outcomes_unwritten`: answered sends whose outcome is not yet written (at most `MAX_IN_FLIGHT`).
    let unwritten: Gauge
    /// `push_send_window`: the sends that may be on the wire now, from FCM's answer time (`SendWindow`).
    let window: Gauge
    /// `push_completer_flush_seconds`: one completer transaction, from its start to its commit.
    private let flushDuration: Histogram
    /// `push_delivery_latency_seconds`: the outbox row's `"createdAt"` to FCM's 200, one observation per SENT delivery.
    private let latency: Histogram
    /// From 5 ms (a push on a quiet system) to an hour (a backlog, an outage): the SLO's 60 s sits between buckets.
    static let latencyBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]

    init(_ registry: MetricsRegistry) {
        self.registry = registry
        deliveries = DeliveryResultLabel.allCases.map { result in
            registry.counter("push_deliveries_total", help: "Push send attempts by result (sent, failed, token_invalid, retry).",
                             labels: ["result": result.rawValue])
        }
        var processed: [OutboxStatus: Counter] = [:]
        for status in OutboxStatus.allCases { processed[status] = Self.processedCounter(registry, status) }
        self.processed = processed
        claimed = registry.counter(Self.claimedName,
                                   help: "Outbox events claimed for processing (an event is claimed again for each attempt).")
        unwritten = registry.gauge("push_outcomes_unwritten",
                                   help: "Sends FCM answered whose outcome is not yet written to the database (with the sends in flight, at most MAX_IN_FLIGHT).")
        window = registry.gauge("push_send_window",
                                help: "Sends that may be on the wire now: up to MAX_IN_FLIGHT / 2, smaller while FCM's answers come slower than its fastest recent answer time allows.")
        flushDuration = registry.histogram("push_completer_flush_seconds",
                                           help: "Time to write one batch of delivery outcomes and settlements (one transaction).",
                                           buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
        latency = registry.histogram("push_delivery_latency_seconds",
                                     help: "Time from the dose being recorded (the outbox row's createdAt) to FCM accepting the push, per SENT delivery.",
                                     buckets: Self.latencyBuckets)
    }

    func flushed(seconds: Double) { flushDuration.observe(seconds) }

    /// A delivery FCM accepted, `seconds` after its dose was recorded.
    func waited(seconds: Double) { latency.observe(max(0, seconds)) }

    private static func processedCounter(_ registry: MetricsRegistry, _ status: OutboxStatus) -> Counter {
        registry.counter("push_outbox_processed_total", help: "Outbox events that reached a state after processing, by status.",
                         labels: ["status": status.rawValue])
    }

    func delivered(_ result: DeliveryResultLabel) {
        deliveries[DeliveryResultLabel.allCases.firstIndex(of: result)!].increment()
    }

    /// `push_recipients_skipped_total{reason}` label values: why a device of an event's recipients was not sent to.
    enum SkipReason: String, Sendable {
        /// Another registration of the device's token was seen more recently.
        case tokenSuperseded = "token_superseded"
    }

    func recipientsSkipped(_ reason: SkipReason, count: Int) {
        registry.counter("push_recipients_skipped_total",
                         help: "Devices of an event's recipients not sent to, by reason (token_superseded: another registration of the token is newer).",
                         labels: ["reason": reason.rawValue]).increment(by: Double(count))
    }

    func tokenDisabled(_ reason: String) {
        registry.counter("push_tokens_disabled_total", help: "Devices disabled because FCM reported their token dead, by reason.",
                         labels: ["reason": reason]).increment()
    }

    func eventFinished(_ status: OutboxStatus) {
        (processed[status] ?? Self.processedCounter(registry, status)).increment()
    }
}
