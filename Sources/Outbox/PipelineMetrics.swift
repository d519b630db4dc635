import Metrics

/// The pipeline's Prometheus series (SPEC §5).
struct PipelineMetrics: Sendable {
    let registry: MetricsRegistry

    init(_ registry: MetricsRegistry) {
        self.registry = registry
        for result in ["sent", "failed", "token_invalid", "retry"] { _ = deliveries(result) }
    }

    private func deliveries(_ result: String) -> Counter {
        registry.counter("push_deliveries_total", help: "Push send attempts by result (sent, failed, token_invalid, retry).",
                         labels: ["result": result])
    }

    func delivered(_ result: String) { deliveries(result).increment() }

    func tokenDisabled(_ reason: String) {
        registry.counter("push_tokens_disabled_total", help: "Devices disabled because FCM reported their token dead, by reason.",
                         labels: ["reason": reason]).increment()
    }

    func eventFinished(_ status: String) {
        registry.counter("push_outbox_processed_total", help: "Outbox events that reached a state after processing, by status.",
                         labels: ["status": status]).increment()
    }
}
