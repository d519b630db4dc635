import FoundationEssentials
import JSON
import HTTPServer
import Lifecycle
import Metrics
import Synchronization

/// A readiness check of `/readyz` (its JSON key).
public enum ReadinessCheck: String, Sendable, CaseIterable {
    case database
    case fcmCredentials = "fcm_credentials"
    case fcm
    case appStore = "app_store"
}

/// The state of one readiness check, rendered as `ok`, `disabled` or `down: reason`.
public enum CheckState: Sendable, Equatable, CustomStringConvertible {
    case ok
    /// Not configured (the App Store loop without its settings): does not hold readiness back.
    case disabled
    case down(String)

    /// True when the check does not hold readiness back.
    public var isPassing: Bool { if case .down = self { false } else { true } }

    public var description: String {
        switch self {
        case .ok: "ok"
        case .disabled: "disabled"
        case .down(let reason): "down: \(reason)"
        }
    }
}

/// Readiness checks and liveness, shared between the daemon's loops and the endpoint.
public final class HealthState: Sendable {
    private let checks = Mutex<[ReadinessCheck: CheckState]>([:])
    /// The loops' heartbeats: a loop that stops beating is reported stalled.
    public let liveness: Liveness

    public init(liveness: Liveness = Liveness(stallAfter: .seconds(25))) { self.liveness = liveness }

    /// Sets a check's state.
    public func set(_ check: ReadinessCheck, _ state: CheckState) { checks.withLock { $0[check] = state } }

    /// Every check as last set.
    public var snapshot: [ReadinessCheck: CheckState] { checks.withLock { $0 } }

    /// Ready when every check passes (and there is at least one).
    public var isReady: Bool {
        let all = snapshot
        return !all.isEmpty && all.values.allSatisfy(\.isPassing)
    }

    /// Loops that are stuck (empty = alive).
    public var stalledLoops: [String] { liveness.stalled() }
}

/// `GET /healthz`, `/readyz`, `/metrics` on HEALTH_ADDR; everything else is 404.
public final class HealthServer: Service {
    private let server: HTTPServer

    /// Most connections open at once; more are closed as soon as accepted, so a flood never takes the descriptors
    /// libpq and libcurl need (a Prometheus scrape and an operator's curl need a handful).
    public static let connectionLimit = 64
    /// Most connections open at once from one address: one client cannot take every slot.
    public static let perIPConnectionLimit = 8
    /// A connection idle this long (a request trickling in, a scrape that never reads) is closed.
    public static let connectionTimeoutSeconds = 10

    /// Starts listening at once on host:port (port 0 picks a free one).
    public init(host: String, port: UInt16, state: HealthState, metrics: MetricsRegistry) throws(HTTPServerError) {
        // One epoll thread: the routes only read memory, and a connection then costs a descriptor, not a thread.
        let options = HTTPServerOptions(threading: .epoll, connectionTimeoutSeconds: Self.connectionTimeoutSeconds,
                                        connectionLimit: Self.connectionLimit, perIPConnectionLimit: Self.perIPConnectionLimit,
                                        maxBodyBytes: 0, screen: HealthServer.screen)
        server = try HTTPServer(host: host, port: port, options: options) { request in
            HealthServer.route(request, state: state, metrics: metrics)
        }
    }

    /// The bound port (useful with port 0).
    public var port: UInt16 { server.port }

    /// Serves (it listens from `init` on, so a taken address fails at start) until `stop`, then closes.
    public func run(until stop: StopSignal) async {
        await stop.wait()
        self.stop()
    }

    /// Stops the listener; idempotent.
    public func stop() { server.stop() }

    /// Answers a method other than GET or HEAD (405) from the request line, before any body is read. A body itself is
    /// refused by `HTTPServer` (`maxBodyBytes: 0`, 413; duplicate `Content-Length` or `Transfer-Encoding`, 400), so
    /// one never read cannot fill memory.
    static func screen(_ head: HTTPServerRequest) -> HTTPServerResponse? {
        guard head.method == "GET" || head.method == "HEAD" else {
            return .json(405, #"{"error":"method not allowed"}"#, headers: ["Allow": "GET, HEAD", "Connection": "close"])
        }
        return nil
    }

    static func route(_ request: HTTPServerRequest, state: HealthState, metrics: MetricsRegistry) -> HTTPServerResponse {
        guard request.method == "GET" || request.method == "HEAD" else {
            return .json(405, #"{"error":"method not allowed"}"#, headers: ["Allow": "GET, HEAD"])
        }
        switch request.path {
        case "/healthz":
            // Alive while the loops make progress, even when the database is down: a restart would not help then.
            let stalled = state.stalledLoops
            if stalled.isEmpty { return .json(200, #"{"status":"ok"}"#) }
            return .json(503, #"{"status":"stalled","loops":[\#(stalled.map { "\"\($0)\"" }.joined(separator: ","))]}"#)
        case "/readyz":
            let checks = state.snapshot
            let body = checks.keys.sorted { $0.rawValue < $1.rawValue }
                .map { "\(jsonString($0.rawValue)):\(jsonString(checks[$0]!.description))" }.joined(separator: ",")
            let ready = state.isReady
            return .json(ready ? 200 : 503, #"{"status":"\#(ready ? "ready" : "not_ready")","checks":{\#(body)}}"#)
        case "/metrics":
            // Readiness as metrics too, so an alert can tell "up but not ready" (and why) from the scrape alone.
            metrics.gauge("medication_worker_ready", help: "1 while /readyz answers 200, else 0.").set(state.isReady ? 1 : 0)
            for (check, value) in state.snapshot {
                metrics.gauge("medication_worker_check_ok", help: "1 while a readiness check is ok or disabled, by check.",
                              labels: ["check": check.rawValue]).set(value.isPassing ? 1 : 0)
            }
            return .text(200, metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        default:
            return .json(404, #"{"error":"not found"}"#)
        }
    }

    static func jsonString(_ value: String) -> String { JSONValue.quoted(value) }
}
