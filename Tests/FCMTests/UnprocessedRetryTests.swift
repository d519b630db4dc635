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
    /// libcurl gives up on a refused stream with a send error (Debian 12's 7.88) or a receive error (8.14): both are
    /// sent again. An answer begun, or any other failure, is not.
    @Test func connectionDied_asSendOrReceiveError_isSentAgain() {
        let died = "Connection died, tried 5 times before giving up"
        #expect(CurlTransfer.isUnprocessed(CURLE_SEND_ERROR, message: died, receivedAnything: false))
        #expect(CurlTransfer.isUnprocessed(CURLE_RECV_ERROR, message: died, receivedAnything: false))
        #expect(!CurlTransfer.isUnprocessed(CURLE_RECV_ERROR, message: died, receivedAnything: true))
        #expect(!CurlTransfer.isUnprocessed(CURLE_RECV_ERROR, message: "Recv failure: Connection reset by peer", receivedAnything: false))
        #expect(!CurlTransfer.isUnprocessed(CURLE_OPERATION_TIMEDOUT, message: died, receivedAnything: false))
    }

    /// A bare HTTP/2 error is never sent again, explained or not: libcurl ends that way a processed stream whose answer
    /// it could not take, too.
    @Test func http2Error_isNotSentAgain() {
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2, message: "", receivedAnything: false))
        let explained = "nghttp2_session_mem_recv() returned -902:The user callback function failed"
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2, message: explained, receivedAnything: false))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2_STREAM, message: "", receivedAnything: false))
    }

    /// A server that processed a request and went away with an answer the client's nghttp2 rejected (its GOAWAY's last
    /// stream is that request's): libcurl fails the send with a bare HTTP/2 error, as it fails the last stream a
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

