import CCurl
@testable import HTTP
import Testing

@Suite("Requests a server never processed")
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

    /// A stream libcurl could not start on a session past its GOAWAY fails as a bare HTTP/2 error, and so does the last
    /// stream a GOAWAY refuses after its body left (libcurl 7.88 returns before its own REFUSED_STREAM retry): both
    /// are sent again. An HTTP/2 error libcurl explains (a broken session it read) is sent again only when the body
    /// never left, and nothing is once an answer has begun.
    @Test func bareHTTP2Error_isSentAgain_anExplainedOneOnlyBeforeTheBodyLeft() {
        #expect(CurlTransfer.isUnprocessed(CURLE_HTTP2, message: "", receivedAnything: false, bodyUnsent: true))
        #expect(CurlTransfer.isUnprocessed(CURLE_HTTP2, message: "", receivedAnything: false, bodyUnsent: false))
        let explained = "nghttp2_session_mem_recv() returned -902:The user callback function failed"
        #expect(CurlTransfer.isUnprocessed(CURLE_HTTP2, message: explained, receivedAnything: false, bodyUnsent: true))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2, message: explained, receivedAnything: false, bodyUnsent: false))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2, message: "", receivedAnything: true, bodyUnsent: true))
        #expect(!CurlTransfer.isUnprocessed(CURLE_HTTP2_STREAM, message: "", receivedAnything: false, bodyUnsent: false))
    }
}
