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
    private let processed: [String: Counter]

    init(_ registry: MetricsRegistry) {
        self.registry = registry
        deliveries = DeliveryResultLabel.allCases.map { result in
            registry.counter("push_deliveries_total", help: "Push send attempts by result (sent, failed, token_invalid, retry).",
                             labels: ["result": result.rawValue])
        }
        var processed: [String: Counter] = [:]
        for status in ["PENDING", "DONE", "DEAD", "EXPIRED"] { processed[status] = Self.processedCounter(registry, status) }
        self.processed = processed
    }

    private static func processedCounter(_ registry: MetricsRegistry, _ status: String) -> Counter {
        registry.counter("push_outbox_processed_total", help: "Outbox events that reached a state after processing, by status.",
                         labels: ["status": status])
    }

    func delivered(_ result: DeliveryResultLabel) {
        deliveries[DeliveryResultLabel.allCases.firstIndex(of: result)!].increment()
    }

    func tokenDisabled(_ reason: String) {
        registry.counter("push_tokens_disabled_total", help: "Devices disabled because FCM reported their token dead, by reason.",
                         labels: ["reason": reason]).increment()
    }

    func eventFinished(_ status: String) {
        (processed[status] ?? Self.processedCounter(registry, status)).increment()
    }
}
