import Dispatch
import HTTP
import Synchronization
import TestSupport
import Testing

/// Clients a failed test leaves behind: one whose driver is stuck cannot be shut down without hanging the test run.
private let abandoned = Recorder<HTTPClient>()

@Suite("HTTP client cancellation", .blockingFixtures)
struct HTTPClientCancelTests {
    /// A client with one slot, and a server that accepts connections and never answers (a request to it holds the slot).
    static func rig() throws -> (silent: LoopbackSocket, client: HTTPClient, url: String) {
        let silent = LoopbackSocket()
        let client = try HTTPClient(configuration: .init(maxInFlight: 1, requestTimeout: .seconds(30)))
        return (silent, client, "http://127.0.0.1:\(silent.port)/")
    }

    /// Waits up to 10 s for `signal`. On a timeout the issue is recorded and the client kept: its driver is stuck, and
    /// shutting it down would hang the test run.
    static func arrived(_ signal: DispatchSemaphore, _ client: HTTPClient, else failure: Comment) -> Bool {
        guard signal.wait(timeout: .now() + 10) == .success else {
            abandoned.record(client)
            Issue.record(failure)
            return false
        }
        return true
    }

    /// A queued request cancelled before it started is answered outside the client's lock, so its completion may
    /// start another request on the same client (the engine answers a cancelled send by starting the next one).
    @Test func cancelledQueuedRequest_itsCompletionCanStartAnother() throws {
        let (silent, client, url) = try Self.rig()
        defer { silent.close() }
        let started = DispatchSemaphore(value: 0)
        let results = Recorder<String>()
        client.start(HTTPRequest(method: .get, url: url)) { _ in }
        let queued = client.start(HTTPRequest(method: .get, url: url)) { result in
            results.record("queued: \(result.failureCode.map { "\($0)" } ?? "answered")")
            // Starting from inside the completion: this trapped on the client's lock before.
            client.start(HTTPRequest(method: .get, url: url)) { _ in }
            started.signal()
        }
        client.cancel(queued)
        guard Self.arrived(started, client, else: "the cancelled request's completion could not start another request") else { return }
        #expect(results.all == ["queued: cancelled"])
        client.shutdown()
    }

    /// `shutdown` from a completion (on the driver thread) returns: the driver cannot wait for itself to end.
    @Test func shutdownFromACompletion_returns() throws {
        let (silent, client, url) = try Self.rig()
        defer { silent.close() }
        let returned = DispatchSemaphore(value: 0)
        let running = client.start(HTTPRequest(method: .get, url: url)) { _ in
            client.shutdown()
            returned.signal()
        }
        client.cancel(running)
        guard Self.arrived(returned, client, else: "shutdown from the driver thread waited for the driver thread") else { return }
        // The first shutdown was the driver's own; this one returns at once, and requests are refused.
        client.shutdown()
        let refused = Mutex<HTTPError.Code?>(nil)
        client.start(HTTPRequest(method: .get, url: url)) { result in refused.withLock { $0 = result.failureCode } }
        #expect(refused.withLock { $0 } == .shutdown)
    }

    /// The client sends a GET without a body or a POST, and refuses anything else at once: a HEAD waited for a body that
    /// never comes (to a server that does not answer, for its whole timeout), and a GET with a body left the handle
    /// posting it again on its next plain GET.
    @Test func headOrAGetWithABody_isRefusedAtOnce() throws {
        let (silent, client, url) = try Self.rig()
        defer { silent.close() }
        let answered = DispatchSemaphore(value: 0)
        let results = Recorder<String>()
        for request in [HTTPRequest(method: "HEAD", url: url), HTTPRequest(method: .get, url: url, body: Array("x".utf8)),
                        HTTPRequest(method: "PUT", url: url, body: Array("x".utf8))] {
            client.start(request) { result in
                results.record(result.failureCode.map { "\($0)" } ?? "answered")
                answered.signal()
            }
        }
        for _ in 0..<3 { guard Self.arrived(answered, client, else: "a request was not refused at once") else { return } }
        #expect(results.all == ["invalidRequest", "invalidRequest", "invalidRequest"])
        client.shutdown()
    }
}

extension Result where Failure == HTTPError {
    var failureCode: HTTPError.Code? {
        if case .failure(let error) = self { error.code } else { nil }
    }
}
