import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// Turns SIGTERM and SIGINT into a callback on a private queue (swift-service-lifecycle style):
/// the default disposition is ignored so the process is not killed before it can stop gracefully.
public final class SignalWatcher: Sendable {
    private let queue = DispatchQueue(label: "medication-worker.signals")
    /// Dispatch sources are not `Sendable`; they are created here and only cancelled in `deinit`.
    private let sources: Mutex<[any DispatchSourceSignal]>

    /// Starts watching; `handler` receives the signal's name each time one arrives.
    public init(signals: [Int32] = [SIGTERM, SIGINT], handler: @escaping @Sendable (String) -> Void) {
        var sources: [any DispatchSourceSignal] = []
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            let name = number == SIGTERM ? "SIGTERM" : number == SIGINT ? "SIGINT" : "signal \(number)"
            source.setEventHandler { handler(name) }
            source.resume()
            sources.append(source)
        }
        self.sources = Mutex(sources)
    }

    deinit { sources.withLock { for source in $0 { source.cancel() } } }
}
