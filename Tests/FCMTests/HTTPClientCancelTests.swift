import Dispatch
import HTTP
import Synchronization
import TestSupport
import Testing

/// Clients a failed test leaves behind: one whose driver is stuck cannot be shut down without hanging the test run.
private let abandoned = Mutex<[HTTPClient]>([])

@Suite("HTTP client cancellation")
struct HTTPClientCancelTests {
    /// A queued request cancelled before it started is answered outside the client's lock, so its completion may
    /// start another request on the same client (the engine answers a cancelled send by starting the next one).
    @Test func cancelledQueuedRequest_itsCompletionCanStartAnother() throws {
        // A server that accepts connections and never answers: the first request holds the only slot.
        let silent = LoopbackSocket(listen: true)
        defer { silent.close() }
        let client = try HTTPClient(configuration: .init(maxInFlight: 1, requestTimeout: .seconds(30)))
        let url = "http://127.0.0.1:\(silent.port)/"
        let started = DispatchSemaphore(value: 0)
        let results = Mutex<[String]>([])
        client.start(HTTPRequest(method: .get, url: url)) { _ in }
        let queued = client.start(HTTPRequest(method: .get, url: url)) { result in
            results.withLock { $0.append("queued: \(result.failureCode.map { "\($0)" } ?? "answered")") }
            // Starting from inside the completion: this waited forever on the client's lock before.
            client.start(HTTPRequest(method: .get, url: url)) { _ in }
            started.signal()
        }
        client.cancel(queued)
        guard started.wait(timeout: .now() + 10) == .success else {
            abandoned.withLock { $0.append(client) }
            Issue.record("the cancelled request's completion could not start another request (deadlock)")
            return
        }
        #expect(results.withLock { $0 } == ["queued: cancelled"])
        client.shutdown()
    }

    /// `shutdown` from a completion (on the driver thread) returns: the driver cannot wait for itself to end.
    @Test func shutdownFromACompletion_returns() throws {
        let silent = LoopbackSocket(listen: true)
        defer { silent.close() }
        let client = try HTTPClient(configuration: .init(maxInFlight: 1, requestTimeout: .seconds(30)))
        let returned = DispatchSemaphore(value: 0)
        let running = client.start(HTTPRequest(method: .get, url: "http://127.0.0.1:\(silent.port)/")) { _ in
            client.shutdown()
            returned.signal()
        }
        client.cancel(running)
        guard returned.wait(timeout: .now() + 10) == .success else {
            abandoned.withLock { $0.append(client) }
            Issue.record("shutdown from the driver thread waited for the driver thread")
            return
        }
        // The first shutdown was the driver's own; this one returns at once, and requests are refused.
        client.shutdown()
        let refused = Mutex<HTTPError.Code?>(nil)
        client.start(HTTPRequest(method: .get, url: "http://127.0.0.1:\(silent.port)/")) { result in
            refused.withLock { $0 = result.failureCode }
        }
        #expect(refused.withLock { $0 } == .shutdown)
    }
}

private extension Result where Failure == HTTPError {
    var failureCode: HTTPError.Code? {
        if case .failure(let error) = self { error.code } else { nil }
    }
}
