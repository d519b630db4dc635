import Foundation
import Health
import HTTPServer
import Logging
import Metrics
import TestSupport
import Testing

@Suite("Logging and health units")
struct JournalSinkTests {
    @Test func journalFields_upperCaseMetadataKeys() {
        let entry = LogEntry(label: "outbox", level: .warning, message: "push failed",
                             metadata: ["fcm.error": "UNREGISTERED", "outbox.id": "7", "device-id": "d1"], date: Date())
        let fields = Dictionary(JournalSink.fields(for: entry), uniquingKeysWith: { $1 })
        #expect(fields["MESSAGE"] == "push failed")
        #expect(fields["PRIORITY"] == "4")
        #expect(fields["SYSLOG_IDENTIFIER"] == "medication-worker")
        #expect(fields["LOGGER"] == "outbox")
        #expect(fields["FCM_ERROR"] == "UNREGISTERED")
        #expect(fields["OUTBOX_ID"] == "7")
        #expect(fields["DEVICE_ID"] == "d1")
    }

    @Test func textLine_isOneKeyValueLine() {
        let entry = LogEntry(label: "outbox", level: .info, message: "a \"quoted\"\nmessage", metadata: ["b.key": "x y", "a": "1"],
                             date: Date(timeIntervalSince1970: 0))
        let line = TextSink.format(entry)
        #expect(!line.contains("\n"))
        #expect(line.hasSuffix(#"msg="a \"quoted\"\nmessage" a=1 b.key="x y""#))
    }

    @Test func logLevel_filtersBelowTheMinimum() {
        let sink = MemorySink()
        let logger = Logger(label: "t", logLevel: .notice, sink: sink)
        logger.info("hidden")
        logger.notice("shown")
        #expect(sink.entries.map(\.message) == ["shown"])
    }

    @Test func readiness_reflectsChecks() {
        let state = HealthState()
        state.set(.database, .down("connection refused"))
        state.set(.fcmCredentials, .ok)
        #expect(!state.isReady)
        state.set(.database, .ok)
        state.set(.appStore, .disabled)
        #expect(state.isReady)
    }

    @Test func metricsText_hasHelpTypeAndHistogramSeries() {
        let registry = MetricsRegistry()
        registry.counter("push_deliveries_total", help: "Deliveries.", labels: ["result": "sent"]).increment(by: 3)
        registry.histogram("push_send_duration_seconds", help: "Send time.", buckets: [0.1, 1]).observe(0.5)
        let text = registry.render()
        #expect(text.contains("# HELP push_deliveries_total Deliveries.\n# TYPE push_deliveries_total counter\npush_deliveries_total{result=\"sent\"} 3\n"))
        #expect(text.contains("push_send_duration_seconds_bucket{le=\"0.1\"} 0\npush_send_duration_seconds_bucket{le=\"1\"} 1\npush_send_duration_seconds_bucket{le=\"+Inf\"} 1\n"))
        #expect(text.contains("push_send_duration_seconds_count 1"))
    }
}
