import Dispatch
import Glibc
import HTTP
import Synchronization
import TestSupport
import Testing

/// SPEC §3 "Independent sends": waiting for a connection is not a fault of the server. Requests that wait inside
/// libcurl for a connection another request is opening (HTTP/2 multiplexing: they wait to share it) and reach their
/// deadline there fail as `queued`, with nothing sent; the request that owns the connection fails as the timeout it is.
@Suite("HTTP client: a deadline passed in libcurl's queue", .blockingFixtures)
struct QueuedTimeoutTests {
    @Test func requestsWaitingForAConnection_failAsQueued_theConnectionsOwnerAsTimeout() throws {
        let silent = LoopbackSocket()  // accepts, never answers: the TLS handshake never ends
        defer { silent.close() }
        let client = try HTTPClient(configuration: .init(maxInFlight: 4))
        defer { client.shutdown() }
        let done = DispatchSemaphore(value: 0)
        let codes = Recorder<String>()
        let messages = Recorder<String>()
        func send(timeout: Duration, as name: String) {
            let request = HTTPRequest(method: .post, url: "https://127.0.0.1:\(silent.port)/send", body: Array("{}".utf8), timeout: timeout)
            client.start(request) { result in
                codes.record("\(name): " + (result.failureCode.map { "\($0)" } ?? "answered"))
                if case .failure(let error) = result { messages.record(error.message) }
                done.signal()
            }
        }
        // The owner first, and the others only once its connection is in the listener's queue: they wait to share it,
        // and reach their deadline while it still hangs in its handshake, however slowly this machine schedules them.
        send(timeout: .seconds(4), as: "owner")
        var listener = pollfd(fd: silent.fd, events: Int16(POLLIN), revents: 0)
        #expect(poll(&listener, 1, 10_000) == 1, "the owner's connection never reached the listener")
        send(timeout: .seconds(1), as: "waiting")
        send(timeout: .seconds(1), as: "waiting")
        for _ in 0..<3 { #expect(done.wait(timeout: .now() + 15) == .success) }
        #expect(codes.all.sorted() == ["owner: timeout", "waiting: queued", "waiting: queued"])
        #expect(messages.all.filter { $0.hasPrefix("no connection free for the request before its deadline (nothing sent)") }.count == 2)
    }
}
