import Foundation
import Health
import HTTPServer
import Logging
import Metrics
import TestSupport
import Testing
import TextSupport

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

    /// Issue 54: a value from a client (a device token, a payload field) cannot put a control byte into the text line:
    /// ESC, BEL, `\r`, DEL and C1 come out as `Printable` escapes inside a quoted value, and backslashes are doubled so
    /// a literal `\u{1B}` in a value stays distinguishable from an escaped ESC.
    @Test func textLine_hostileValues_leaveNoControlByte() {
        let hostile = "unregi…\u{1B}[2J\u{1B}]0;title\u{7}\r\u{9B}31m\u{7F}"
        let entry = LogEntry(label: "outbox", level: .info, message: "token \u{1B}[2J", metadata: ["device.token": hostile, "path": #"a\u{1B}"#],
                             date: Date(timeIntervalSince1970: 0))
        let line = TextSink.format(entry)
        #expect(!line.utf8.contains { $0 < 0x20 || $0 == 0x7F }, "\(line)")
        #expect(!line.unicodeScalars.contains { (0x80...0x9F).contains($0.value) }, "\(line)")
        #expect(line.hasSuffix(#"msg="token \u{1B}[2J" device.token="unregi…\u{1B}[2J\u{1B}]0;title\u{7}\r\u{9B}31m\u{7F}" path="a\\u{1B}""#),
                "\(line)")
    }

    @Test func journalFields_hostileValues_areEscaped() {
        let entry = LogEntry(label: "outbox", level: .info, message: "forged\r\nline\u{1B}[2J",
                             metadata: ["device.token": "unregi…\u{7}\r\u{1B}c", "fcm.error": "UNREGISTERED", "note": "服薬記録"], date: Date())
        let fields = Dictionary(JournalSink.fields(for: entry), uniquingKeysWith: { $1 })
        #expect(fields["MESSAGE"] == #"forged\r\nline\u{1B}[2J"#)
        #expect(fields["DEVICE_TOKEN"] == #"unregi…\u{7}\r\u{1B}c"#)
        #expect(fields["FCM_ERROR"] == "UNREGISTERED")
        #expect(fields["NOTE"] == "服薬記録")
        for (name, value) in fields { #expect(!value.unicodeScalars.contains { Printable.isUnsafe($0) }, "\(name)") }
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
