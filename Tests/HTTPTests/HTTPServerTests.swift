import Foundation
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
}
