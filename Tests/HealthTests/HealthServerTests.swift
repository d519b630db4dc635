import Foundation
import HTTP
import Health
import Metrics
import Testing
import TestSupport

/// HealthServer over real loopback HTTP (port 0), in-process.
@Suite("Health endpoints in-process", .blockingFixtures)
struct HealthServerTests {
    func get(_ port: UInt16, _ path: String, method: HTTPMethod = .get) async throws -> HTTPResponse {
        let client = try HTTPClient()
        defer { client.shutdown() }
        return try await client.execute(HTTPRequest(method: method, url: "http://127.0.0.1:\(port)\(path)", timeout: .seconds(5)))
    }

    @Test func unknownPath_is404() async throws {
        let server = try HealthServer(host: "127.0.0.1", port: 0, state: HealthState(), metrics: MetricsRegistry())
        defer { server.stop() }
        let response = try await get(server.port, "/admin")
        #expect(response.status == 404)
        #expect(try await get(server.port, "/healthz/extra").status == 404)
    }

    @Test func readyz_flipsFrom503To200WhenTheCheckRecovers() async throws {
        let state = HealthState()
        state.set(.database, .down("connection refused"))
        state.set(.fcmCredentials, .ok)
        state.set(.appStore, .disabled)
        let server = try HealthServer(host: "127.0.0.1", port: 0, state: state, metrics: MetricsRegistry())
        defer { server.stop() }

        let down = try await get(server.port, "/readyz")
        #expect(down.status == 503)
        let downText = String(decoding: down.body, as: UTF8.self)
        #expect(downText.contains(#""status":"not_ready""#))
        #expect(downText.contains(#""database":"down: connection refused""#))
        #expect(down.headers["content-type"] == "application/json")

        state.set(.database, .ok)
        let up = try await get(server.port, "/readyz")
        #expect(up.status == 200)
        let upText = String(decoding: up.body, as: UTF8.self)
        #expect(upText.contains(#""status":"ready""#))
        #expect(upText.contains(#""app_store":"disabled""#))
    }

    @Test func healthz_reportsStalledLoopsRegardlessOfReadiness() async throws {
        // Any time since a beat is too long: a loop that beat once is stalled at the next request.
        let liveness = Liveness(stallAfter: .zero)
        let state = HealthState(liveness: liveness)
        state.set(.database, .down("timeout"))
        let server = try HealthServer(host: "127.0.0.1", port: 0, state: state, metrics: MetricsRegistry())
        defer { server.stop() }

        #expect(try await get(server.port, "/healthz").status == 200)
        liveness.beat("outbox")
        let stalled = try await get(server.port, "/healthz")
        #expect(stalled.status == 503)
        #expect(String(decoding: stalled.body, as: UTF8.self).contains(#""loops":["outbox"]"#))
    }

    @Test func metrics_hasHelpTypeAndProcessGauges() async throws {
        let registry = MetricsRegistry()
        ProcessMetrics.register(in: registry)
        registry.counter("push_deliveries_total", help: "Deliveries by result.", labels: ["result": "sent"]).increment()
        let server = try HealthServer(host: "127.0.0.1", port: 0, state: HealthState(), metrics: registry)
        defer { server.stop() }

        let response = try await get(server.port, "/metrics")
        #expect(response.status == 200)
        #expect(response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        let text = String(decoding: response.body, as: UTF8.self)
        #expect(text.contains("# HELP push_deliveries_total Deliveries by result."))
        #expect(text.contains("# TYPE push_deliveries_total counter"))
        #expect(text.contains(#"push_deliveries_total{result="sent"} 1"#))
        #expect(text.contains("# TYPE process_resident_memory_bytes gauge"))
        #expect((registry.value("process_resident_memory_bytes") ?? 0) > 0)
        #expect((registry.value("process_open_fds") ?? 0) > 0)
        #expect((registry.value("process_start_time_seconds") ?? 0) > 1_600_000_000)
    }

    @Test func metrics_exportReadinessAndEachCheck() async throws {
        let state = HealthState()
        state.set(.database, .down("timeout"))
        state.set(.fcmCredentials, .ok)
        state.set(.appStore, .disabled)
        let server = try HealthServer(host: "127.0.0.1", port: 0, state: state, metrics: MetricsRegistry())
        defer { server.stop() }

        let notReady = String(decoding: try await get(server.port, "/metrics").body, as: UTF8.self)
        #expect(notReady.contains("# TYPE medication_worker_ready gauge"))
        #expect(notReady.contains("medication_worker_ready 0"))
        #expect(notReady.contains(#"medication_worker_check_ok{check="database"} 0"#))
        #expect(notReady.contains(#"medication_worker_check_ok{check="app_store"} 1"#))
        state.set(.database, .ok)
        let ready = String(decoding: try await get(server.port, "/metrics").body, as: UTF8.self)
        #expect(ready.contains("medication_worker_ready 1"))
        #expect(ready.contains(#"medication_worker_check_ok{check="database"} 1"#))
    }

    @Test func post_isRejected() async throws {
        let server = try HealthServer(host: "127.0.0.1", port: 0, state: HealthState(), metrics: MetricsRegistry())
        defer { server.stop() }
        let refused = try await get(server.port, "/healthz", method: "POST")
        #expect(refused.status == 405)
        #expect(refused.headers["allow"] == "GET, HEAD")
    }

    /// Issue 45: the method and any body are judged from the headers, on libmicrohttpd's first callback. An endless
    /// chunked POST gets its 405 while its body is still coming (it used to be read into memory until it ended), and
    /// a GET announcing a body gets 413 without the body ever being sent.
    @Test func endlessChunkedPost_andAGetWithABody_areAnsweredBeforeTheBodyIsRead() async throws {
        let server = try HealthServer(host: "127.0.0.1", port: 0, state: HealthState(), metrics: MetricsRegistry())
        defer { server.stop() }
        let post = RawClients.connect(port: server.port)
        defer { close(post) }
        #expect(RawClients.wait(post, events: Int16(POLLOUT), milliseconds: 2000))
        RawClients.send(post, "POST /readyz HTTP/1.1\r\nHost: health\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + String(repeating: "x", count: 1024) + "\r\n")
        let refused = RawClients.read(post, seconds: 5) { $0.contains("\r\n\r\n") }
        #expect(refused.hasPrefix("HTTP/1.1 405"), "answer to an unfinished chunked POST: \(refused.prefix(200))")

        let announced = RawClients.connect(port: server.port)
        defer { close(announced) }
        #expect(RawClients.wait(announced, events: Int16(POLLOUT), milliseconds: 2000))
        RawClients.send(announced, "GET /readyz HTTP/1.1\r\nHost: health\r\nContent-Length: 1000000\r\n\r\n")
        let tooLarge = RawClients.read(announced, seconds: 5) { $0.contains("\r\n\r\n") }
        #expect(tooLarge.hasPrefix("HTTP/1.1 413"), "answer to a GET announcing a body: \(tooLarge.prefix(200))")
        #expect(try await get(server.port, "/healthz").status == 200)
    }
}
