import Foundation
import Synchronization
import HTTP
import HTTPServer
import Testing
import TestSupport

@Suite("HTTP server and client on loopback", .blockingFixtures)
struct HTTPServerTests {
    @Test func plainHTTP_roundTripsMethodPathQueryHeadersAndBody() async throws {
        let server = try HTTPServer { request in
            .json(201, #"{"method":"\#(request.method)","path":"\#(request.path)","q":"\#(request.query["a"] ?? "")","h":"\#(request.headers["x-test"] ?? "")","len":\#(request.body.count)}"#,
                  headers: ["X-Reply": "yes"])
        }
        defer { server.stop() }
        let client = try HTTPClient()
        defer { client.shutdown() }
        let body = Array(repeating: UInt8(ascii: "x"), count: 100_000)
        let response = try await client.execute(HTTPRequest(method: "POST", url: "http://127.0.0.1:\(server.port)/v1/thing?a=b",
                                                            headers: ["X-Test": "服薬"], body: body))
        #expect(response.status == 201)
        #expect(response.headers["x-reply"] == "yes")
        #expect(response.httpVersion == "1.1")
        let text = String(decoding: response.body, as: UTF8.self)
        #expect(text.contains(#""method":"POST""#))
        #expect(text.contains(#""path":"/v1/thing""#))
        #expect(text.contains(#""q":"b""#))
        #expect(text.contains(#""len":100000"#))
        #expect(server.connectionsAccepted == 1)
    }

    @Test func tls_trustedThroughCAFileOnly() async throws {
        let fixtures = TLSFixtures.shared
        let server = try HTTPServer(tls: TLSIdentity(certificatePEM: fixtures.serverCertificatePEM, privateKeyPEM: fixtures.serverKeyPEM)) { _ in
            .text(200, "secure")
        }
        defer { server.stop() }
        let trusting = try HTTPClient(configuration: .init(caFile: fixtures.caFile))
        defer { trusting.shutdown() }
        let response = try await trusting.execute(HTTPRequest(url: "https://127.0.0.1:\(server.port)/"))
        #expect(String(decoding: response.body, as: UTF8.self) == "secure")
        // The combined bundle lives in memory: no file of this process in the temporary directory, even while the
        // client lives (a file there outlived every daemon that did not end through the client's deinit).
        let temporary = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        let left = (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []
        #expect(!left.contains { $0.hasPrefix("medication-worker-ca-\(getpid())-") }, "a CA bundle file in \(temporary)")

        let untrusting = try HTTPClient()
        defer { untrusting.shutdown() }
        let error = await #expect(throws: HTTPError.self) {
            _ = try await untrusting.execute(HTTPRequest(url: "https://127.0.0.1:\(server.port)/"))
        }
        #expect(error?.code == .tls)
    }

    @Test func connectionRefused_isAConnectError() async throws {
        let server = try HTTPServer { _ in .text(200, "") }
        let port = server.port
        server.stop()
        let client = try HTTPClient()
        defer { client.shutdown() }
        let error = await #expect(throws: HTTPError.self) {
            _ = try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(port)/"))
        }
        #expect(error?.code == .connect)
    }

    /// Issue 54: libmicrohttpd frames the body by the first `Content-Length`, a dictionary of headers keeps the last. Two
    /// of them are refused from the headers (400) on every server, the body is never read into memory, the handler
    /// never runs, and the connection is closed.
    @Test func duplicateContentLength_isRefused400_unread_andTheConnectionClosed() async throws {
        let calls = Mutex(0)
        let server = try HTTPServer { _ in calls.withLock { $0 += 1 }; return .text(200, "taken") }
        defer { server.stop() }
        let outcome = RawClients.flood(port: server.port, head: "POST /v1 HTTP/1.1\r\nHost: t\r\nContent-Length: 4000000000\r\nContent-Length: 0\r\n\r\n",
                                       bytes: 32 << 20, seconds: 10)
        #expect(outcome.answer.hasPrefix("HTTP/1.1 400"), "answer: \(outcome.answer.prefix(200))")
        #expect(outcome.answer.contains("not several"))
        #expect(outcome.closedByServer)
        #expect(outcome.sent < 32 << 20, "the server took all \(outcome.sent) bytes")
        #expect(calls.withLock { $0 } == 0)

        let both = RawClients.flood(port: server.port, head: "POST /v1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                                    bytes: 0, seconds: 5)
        #expect(both.answer.hasPrefix("HTTP/1.1 400"), "answer: \(both.answer.prefix(200))")
    }

    /// Issue 54: a body is kept up to the server's `maxBodyBytes`: one announced larger is answered 413 from its
    /// headers, a chunked one is cut off once it passes the cap, and one within it reaches the handler whole.
    @Test func bodyCap_announcedOverIs413_chunkedOverIsCutOff_withinReachesTheHandler() async throws {
        let lengths = Mutex<[Int]>([])
        let server = try HTTPServer(options: HTTPServerOptions(maxBodyBytes: 1000)) { request in
            lengths.withLock { $0.append(request.body.count) }
            return .text(200, "\(request.body.count)")
        }
        defer { server.stop() }
        let announced = RawClients.flood(port: server.port, head: "POST /v1 HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n",
                                         bytes: 0, seconds: 5)
        #expect(announced.answer.hasPrefix("HTTP/1.1 413"), "answer: \(announced.answer.prefix(200))")
        #expect(announced.answer.contains("up to 1000 bytes"))

        let chunk = "200\r\n" + String(repeating: "x", count: 512) + "\r\n"
        let chunked = RawClients.flood(port: server.port, head: "POST /v1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk + chunk,
                                       bytes: 0, seconds: 5)
        #expect(chunked.closedByServer)
        #expect(!chunked.answer.hasPrefix("HTTP/1.1 200"), "answer: \(chunked.answer.prefix(200))")

        let client = try HTTPClient()
        defer { client.shutdown() }
        let within = try await client.execute(HTTPRequest(method: "POST", url: "http://127.0.0.1:\(server.port)/v1",
                                                          body: Array(repeating: UInt8(ascii: "y"), count: 1000)))
        #expect(within.status == 200)
        #expect(lengths.withLock { $0 } == [1000])
    }

    /// Issue 54: an answer's body is read into memory up to 1 MiB; a larger one fails the request with an error that
    /// says so, instead of being buffered whole.
    @Test func responseBodyOverOneMiB_isAnErrorSayingSo() async throws {
        let server = try HTTPServer { request in .text(200, String(repeating: "z", count: request.path == "/big" ? (1 << 20) + 1 : 1 << 20)) }
        defer { server.stop() }
        let client = try HTTPClient()
        defer { client.shutdown() }
        #expect(try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(server.port)/fits")).body.count == 1 << 20)
        let error = await #expect(throws: HTTPError.self) {
            _ = try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(server.port)/big"))
        }
        #expect("\(error.map { "\($0)" } ?? "")".contains("larger than 1048576 bytes"), "\(String(describing: error))")
    }
}
