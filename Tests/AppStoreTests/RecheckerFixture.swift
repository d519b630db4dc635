import Foundation
import HTTP
import Lifecycle
import Logging
import Metrics
import Postgres
@testable import AppStore

extension EntitlementRechecker {
    /// Tests: a rechecker with pools and an HTTP client of its own (the daemon passes shared ones in).
    convenience init(configuration: AppStoreConfiguration, conninfo: String, logger: Logger, metrics: MetricsRegistry,
                     now: @escaping @Sendable () -> Date = Date.init, onKeyStatus: @escaping @Sendable (String?) -> Void = { _ in }) throws {
        self.init(configuration: configuration, database: PostgresClient(conninfo: conninfo, maxConnections: 4),
                  leaseConnection: PostgresClient(conninfo: conninfo, maxConnections: 1),
                  http: try HTTPClient(configuration: Self.httpConfiguration(for: configuration)),
                  logger: logger, metrics: metrics, now: now, onKeyStatus: onKeyStatus)
    }

    /// Tests: the notification poller the daemon's wiring would build beside this sweep (nil when off).
    var history: NotificationHistoryPoller? { NotificationHistoryPoller(context: context) }

    /// Tests: closes the HTTP client the convenience initializer built.
    func shutdown() { context.http.shutdown() }

    /// Tests: runs as the daemon does until the task is cancelled (cancellation requests the stop).
    func run() async {
        let stop = StopSignal()
        await withTaskCancellationHandler {
            // The sweep and, beside it, the notification poller, as the daemon's wiring runs them.
            try? await ConcurrentServices([self] + (history.map { [$0] } ?? [])).run(until: stop)
        } onCancel: {
            stop.request(grace: .zero)
        }
    }
}
