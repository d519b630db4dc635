import CCurl
import FCM
import FCMEmulator
@testable import HTTP
import Logging
import Metrics
import Push
import TestSupport
import Testing

@Suite("Requests a server never processed", .blockingFixtures)
struct UnprocessedRetryTests {
    /// libcurl 7.88 gives up on a refused stream with the receive error that started its last retry, not only with a
    /// send error: both are sent again. An answer begun, or any other failure, is not.
    @Test func connectionDied_asSendOrReceiveError_isSentAgain() {
        let died = "Connection died, tried 5 times before giving up"
        #expect(CurlTransfer.isUnprocessed(CURLE_SEND_ERROR, message: died, receivedAnything: false, bodyUnsent: false))
        #expect(CurlTransfer.isUnprocessed(CURLE_RECV_ERROR, message: died, receivedAnything: false, bodyUnsent: false))
        #expect(!CurlTransfer.isUnprocessed(CURLE_RECV_ERROR, message: died, receivedAnything: true, bodyUnsent: false))
        #expect(!CurlTransfer.isUnprocessed(CURLE_RECV_ERROR, message: "Recv failure: Connection reset by peer", receivedAnything: false,
                                            bodyUnsent: true))
        #expect(!CurlTransfer.isUnprocessed(CURLE_OPERATION_TIMEDOUT, message: died, receivedAnything: false, bodyUnsent: true))
    }

    /// A stream libcurl could not start on a session past its GOAWAY fails as an HTTP/2 error before its body left:
    /// sent again. After the body left, a bare HTTP/2 error is not (libcurl 7.88 ends a processed stream whose answer
    /// it could not take that way too), nor is anything once an answer has begun.
    @Test func http2Error_isSentAgainOnlyBeforeTheBodyLeft() {
        #expect(CurlTransfer.isUnprocessed(CURLE_HTTP2, message: "", receivedAnything: false, bodyUnsent: true))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2, message: "", receivedAnything: false, bodyUnsent: false))
        let explained = "nghttp2_session_mem_recv() returned -902:The user callback function failed"
        #expect(CurlTransfer.isUnprocessed(CURLE_HTTP2, message: explained, receivedAnything: false, bodyUnsent: true))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2, message: explained, receivedAnything: false, bodyUnsent: false))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2, message: "", receivedAnything: true, bodyUnsent: true))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2_STREAM, message: "", receivedAnything: false, bodyUnsent: false))
    }

    /// A server that processed a request and went away with an answer the client's nghttp2 rejected (its GOAWAY's last
    /// stream is that request's): libcurl 7.88 fails the send with a bare HTTP/2 error, as it fails the last stream a
    /// GOAWAY refuses. Nothing proves it unprocessed, so it is not sent again: the send comes back as a transport
    /// failure for the engine to retry (counted in its attempts), and the server processed it once (21 times before).
    @Test func aStreamTheServerProcessed_whoseAnswerWasRejected_isNotSentAgain() async throws {
        let fixtures = TLSFixtures.shared
        let server = try await ResettingHTTP2Server()
        defer { server.stop() }
        let keys = try fixtures.rsaKeyPair()
        let emulator = try FCMEmulator(configuration: fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM))
        defer { emulator.stop() }
        let file = try fixtures.serviceAccountFile(privateKeyPEM: keys.privatePEM, tokenURI: emulator.tokenURI)
        let sender = try FCMSender(configuration: FCMConfiguration(serviceAccount: try ServiceAccount.load(path: file), baseURL: server.url,
                                                                   http: HTTPClientConfiguration(maxInFlight: 4, caFile: fixtures.caFile)),
                                   logger: Logger(label: "fcm", sink: MemorySink()), metrics: MetricsRegistry())
        defer { sender.shutdown() }
        let outcome = await sender.send(FCMSenderTests.push("processed-then-reset"))
        guard case .retry(let reason, _, _) = outcome else { Issue.record("not a retry: \(outcome)"); return }
        #expect(reason.hasPrefix("TRANSPORT_"), "\(reason)")
        #expect(server.processed == 1, "the server processed the push \(server.processed) times")
    }
}

