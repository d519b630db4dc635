import Lifecycle
import Postgres

/// The listener as one of the daemon's services: the wrapper module knows nothing of the service lifecycle.
extension PostgresListener: Service {
    /// Listens from start to `stop`; the thread has closed its connection when this returns.
    public func run(until stop: StopSignal) async {
        start()
        await stop.wait()
        self.stop()
    }
}
