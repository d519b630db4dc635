import CCurl
import FoundationEssentials
import Glibc
import Timekeeping

/// One easy handle, reused request after request (libcurl keeps options across transfers). It
/// owns the handle, its header list and the request and response buffers; they live as long as
/// libcurl may use them. Only what changes between requests is set again, so a steady stream of
/// FCM sends costs a body copy and a few setopts per request. Touched by the driver thread only.
final class CurlTransfer {
    let easy: UnsafeMutableRawPointer
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var headerSource: [String: String]?
    private var url: String?
    /// `url` parsed once (`CURLOPT_CURLU`): libcurl otherwise parses the URL text again for every request, 7.88 and 8.14
    /// alike (url.c; docs/benchmark.md: 253.7k -> 240.0k instructions per delivery on 7.88).
    private var parsedURL: OpaquePointer?
    private var method: HTTPMethod?
    private var timeoutMs = -1
    private var bodyBuffer: UnsafeMutableRawBufferPointer
    private var errorBuffer: UnsafeMutablePointer<CChar>
    var responseBody: [UInt8] = []
    /// Set when the answer's body passed `maxResponseBytes` (the transfer is then aborted).
    var responseTooLarge = false
    /// The most of one answer kept in memory: FCM, OAuth and App Store answers are a few KiB; a server (or a proxy)
    /// that sends more is refused rather than buffered.
    static let maxResponseBytes = 1 << 20
    var responseHeaders: [UInt8] = []
    /// Times this request was sent again because the server closed the connection before processing it.
    var resends = 0
    /// The request in progress: its id and who waits for it.
    var id: UInt64 = 0
    /// The server this transfer goes to, while that server's protocol is not known yet.
    var probing: Substring?
    /// The server is not known to multiplex: this transfer may need a connection of its own.
    var needsOwnConnection = false
    private var completion: HTTPClient.Completion?

    init(configuration: HTTPClientConfiguration, caBundlePath: String?, share: UnsafeMutableRawPointer,
         tls: UnsafeMutablePointer<mw_tls_state>) throws(HTTPError) {
        guard let easy = curl_easy_init() else { throw HTTPError(.invalidRequest, "curl_easy_init failed") }
        self.easy = easy
        bodyBuffer = .allocate(byteCount: 1024, alignment: 1)
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        try configureOnce(configuration, caBundlePath)
        // TLS: OpenSSL keeps its record buffers, and a session resumes on the next connection (`mw_tune_tls_context` in
        // the CCurl shim), from the session cache the client's easy handles share.
        try check(mw_easy_tune_tls(easy, tls), "SSL_CTX_FUNCTION")
        try check(mw_easy_setopt_ptr(easy, CURLOPT_SHARE, share), "SHARE")
        try check(TransferSockets.install(on: easy, tls: tls), "SOCKOPTFUNCTION")
    }

    deinit {
        curl_easy_cleanup(easy)
        if let parsedURL { curl_url_cleanup(parsedURL) }
        if let headerList { curl_slist_free_all(headerList) }
        bodyBuffer.deallocate()
        errorBuffer.deallocate()
    }

    private func check(_ code: CURLcode, _ what: String) throws(HTTPError) {
        guard code == CURLE_OK else {
            throw HTTPError(.invalidRequest, "\(what): \(String(cString: curl_easy_strerror(code)))")
        }
    }

    /// Options that never change for this client.
    private func configureOnce(_ configuration: HTTPClientConfiguration, _ caBundlePath: String?) throws(HTTPError) {
        try check(mw_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1), "NOSIGNAL")
        // HTTP/2 by ALPN on TLS, HTTP/1.1 otherwise; never prior knowledge. Through a proxy's CONNECT tunnel, HTTP/1.1
        // (set per URL in `prepare`): both libcurl releases lose sends multiplexed through tunnels as connections turn
        // over. Behind tinyproxy with GOAWAY every 10 requests, 1,000 sends at 40 in flight: Debian 12's 7.88 sent 301
        // (it hands transfers waiting to multiplex to a tunnel not yet up: "send: no filter connected"), Debian 13's 8.14
        // sent 840, with 880 logged by the server (40 answered and still failed: sent twice on the engine's retry).
        // Over HTTP/1.1 each request in flight has its own tunnel, kept alive. A host `NO_PROXY` exempts counts as
        // proxied here (libcurl applies `NO_PROXY`): HTTP/1.1 costs it speed, not pushes.
        // Wait for an existing connection to multiplex on rather than opening another.
        try check(mw_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1), "PIPEWAIT")
        try check(mw_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "SSL_VERIFYPEER")
        try check(mw_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "SSL_VERIFYHOST")
        if let caBundlePath {
            // CAINFO replaces the default store, so this file holds the system bundle plus the extra CA. An `https://`
            // proxy is verified against the same trust: the CA an operator adds is the one a private proxy's certificate
            // comes from as often as a server's.
            try check(mw_easy_setopt_cstr(easy, CURLOPT_CAINFO, caBundlePath), "CAINFO")
            try check(mw_easy_setopt_cstr(easy, CURLOPT_PROXY_CAINFO, caBundlePath), "PROXY_CAINFO")
        }
        // Trust comes from the CA file alone (Debian's bundle, or the one above), not also from a hashed directory:
        // libcurl caches a file's parsed store in the multi handle, but not when a CA directory is set (Debian's
        // libcurl sets /etc/ssl/certs by default). Uncached, every new connection (each GOAWAY, each
        // `maxConnectionAge`) parsed the whole bundle again: about 28 ms of CPU per connection under OpenSSL 3.
        try check(mw_easy_setopt_cstr(easy, CURLOPT_CAPATH, nil), "CAPATH")
        try check(mw_easy_setopt_cstr(easy, CURLOPT_PROXY_CAPATH, nil), "PROXY_CAPATH")
        try check(mw_easy_setopt_long(easy, CURLOPT_CA_CACHE_TIMEOUT, 3600), "CA_CACHE_TIMEOUT")
        try check(mw_easy_setopt_cstr(easy, CURLOPT_NOPROXY, ProxySettings.process.noProxy), "NOPROXY")
        // A proxy's answer to CONNECT is not the server's: kept out of the answer's headers, it does not make a request
        // that died before the server answered look answered (`isUnprocessedRetryable`).
        try check(mw_easy_setopt_long(easy, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1), "SUPPRESS_CONNECT_HEADERS")
        // Connection health: an idle connection silently dropped (NAT, half-open) is found by TCP keepalive
        // probes (10 s idle, then every 5 s); one that stops acknowledging what we send is dropped after
        // `stallTimeout` (TCP_USER_TIMEOUT, set by `TransferSockets`); none is reused past `maxConnectionAge`, so turnover is routine.
        try check(mw_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1), "TCP_KEEPALIVE")
        try check(mw_easy_setopt_long(easy, CURLOPT_TCP_KEEPIDLE, 10), "TCP_KEEPIDLE")
        try check(mw_easy_setopt_long(easy, CURLOPT_TCP_KEEPINTVL, 5), "TCP_KEEPINTVL")
        try check(mw_easy_setopt_long(easy, CURLOPT_MAXLIFETIME_CONN, Int(configuration.maxConnectionAge.components.seconds)), "MAXLIFETIME_CONN")
        try check(mw_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeout.milliseconds), "CONNECTTIMEOUT")
        try check(mw_easy_setopt_ptr(easy, CURLOPT_ERRORBUFFER, errorBuffer), "ERRORBUFFER")
        let me = Unmanaged.passUnretained(self).toOpaque()
        try check(mw_easy_setopt_ptr(easy, CURLOPT_PRIVATE, me), "PRIVATE")
        try check(mw_easy_setopt_ptr(easy, CURLOPT_WRITEDATA, me), "WRITEDATA")
        try check(mw_easy_setopt_callback(easy, CURLOPT_WRITEFUNCTION, curlWriteBody), "WRITEFUNCTION")
        try check(mw_easy_setopt_ptr(easy, CURLOPT_HEADERDATA, me), "HEADERDATA")
        try check(mw_easy_setopt_callback(easy, CURLOPT_HEADERFUNCTION, curlWriteHeader), "HEADERFUNCTION")
    }

    /// Sets what this request needs that differs from the previous one on this handle.
    func prepare(_ request: HTTPRequest, id: UInt64, configuration: HTTPClientConfiguration,
                 completion: @escaping HTTPClient.Completion) throws(HTTPError) {
        self.id = id
        self.completion = completion
        resends = 0
        resetResponse()
        if url != request.url {
            try setURL(request.url)
            let proxy = ProxySettings.process.proxy(for: request.url)
            try check(mw_easy_setopt_cstr(easy, CURLOPT_PROXY, proxy), "PROXY")
            let version = proxy.isEmpty ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1
            try check(mw_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(version)), "HTTP_VERSION")
            url = request.url
        }
        let timeout = (request.timeout ?? configuration.requestTimeout).milliseconds
        if timeout != timeoutMs {
            try check(mw_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, timeout), "TIMEOUT")
            timeoutMs = timeout
        }
        // A GET without a body or a POST: all that `HTTPClient.start` lets through.
        if method != request.method {
            try check(mw_easy_setopt_long(easy, request.method == .get ? CURLOPT_HTTPGET : CURLOPT_POST, 1), request.method.rawValue)
            method = request.method
        }
        if request.method == .post {
            // POSTFIELDS does not copy: the bytes live in this transfer's own buffer until the next request.
            if bodyBuffer.count < request.body.count {
                bodyBuffer.deallocate()
                bodyBuffer = .allocate(byteCount: max(request.body.count, bodyBuffer.count * 2), alignment: 1)
            }
            request.body.withUnsafeBytes { bytes in
                if let source = bytes.baseAddress { bodyBuffer.baseAddress!.copyMemory(from: source, byteCount: bytes.count) }
            }
            try check(mw_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, request.body.count), "POSTFIELDSIZE")
            try check(mw_easy_setopt_ptr(easy, CURLOPT_POSTFIELDS, bodyBuffer.baseAddress), "POSTFIELDS")
        }
        try setHeaders(of: request)
    }

    /// Points the handle at `text`, parsed here once for every request to it. A URL that libcurl's parser refuses is
    /// set as text instead, so the transfer fails as it always did (`CURLE_URL_MALFORMAT`, named in its error).
    private func setURL(_ text: String) throws(HTTPError) {
        let handle = parsedURL ?? curl_url()
        parsedURL = handle
        if let handle, curl_url_set(handle, CURLUPART_URL, text, 0) == CURLUE_OK {
            try check(mw_easy_setopt_ptr(easy, CURLOPT_CURLU, UnsafeMutableRawPointer(handle)), "CURLU")
        } else {
            try check(mw_easy_setopt_ptr(easy, CURLOPT_CURLU, nil), "CURLU")
            try check(mw_easy_setopt_cstr(easy, CURLOPT_URL, text), "URL")
        }
    }

    /// The header list, built again only when the request's headers differ from the last request's on this handle.
    private func setHeaders(of request: HTTPRequest) throws(HTTPError) {
        if headerSource != request.headers {
            if let headerList { curl_slist_free_all(headerList) }
            headerList = nil
            for (name, value) in request.headers {
                // "Name:" with an empty value removes a header curl would add.
                headerList = curl_slist_append(headerList, value.isEmpty ? "\(name):" : "\(name): \(value)")
            }
            try check(mw_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList), "HTTPHEADER")
            headerSource = request.headers
        }
    }

    /// Clears what a previous try of this request received.
    func resetResponse() {
        responseBody.removeAll(keepingCapacity: true)
        responseTooLarge = false
        responseHeaders.removeAll(keepingCapacity: true)
        errorBuffer[0] = 0
    }

    /// The request failed in a way that shows the server did not act on it, so it may be sent again.
    func isUnprocessedRetryable(_ code: CURLcode) -> Bool {
        Self.isUnprocessed(code, message: String(cString: errorBuffer),
                           receivedAnything: !responseHeaders.isEmpty || !responseBody.isEmpty)
    }

    /// Nothing came back and libcurl said "Connection died": it gave up retrying a stream the server refused
    /// (REFUSED_STREAM, or above a GOAWAY's last stream id) or a reused connection found closed. Debian 12's libcurl 7.88
    /// says so with a send error, 8.14 with a receive error (both: HTTP2Tests.goawayEveryTenRequests_…). Any other
    /// error, a bare HTTP/2 one included, may have been processed: the engine retries it later as a transport failure.
    static func isUnprocessed(_ code: CURLcode, message: String, receivedAnything: Bool) -> Bool {
        guard !receivedAnything, code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR else { return false }
        return message.hasPrefix("Connection died")
    }

    /// Hands the result to whoever started the request (exactly once).
    func complete(_ result: Result<HTTPResponse, HTTPError>) {
        let completion = self.completion
        self.completion = nil
        completion?(result)
    }

    /// Once libcurl reports the transfer done: builds the response or the error, hands it to the completion, and
    /// returns it (for the driver's bookkeeping).
    @discardableResult
    func finish(_ code: CURLcode) -> Result<HTTPResponse, HTTPError> {
        let result = outcome(code)
        complete(result)
        return result
    }

    private func outcome(_ code: CURLcode) -> Result<HTTPResponse, HTTPError> {
        guard code == CURLE_OK else {
            if responseTooLarge {
                return .failure(HTTPError(.transport, "the response body is larger than \(Self.maxResponseBytes) bytes (the most read into memory)"))
            }
            let detail = String(cString: errorBuffer)
            var message = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            // libcurl names the address it could not reach, or says the proxy refused the tunnel ("CONNECT tunnel
            // failed, response 407"); when it is the proxy's doing, say so (and where the proxy was set).
            if let url, let proxy = ProxySettings.process.source(for: url),
               proxy.isNamed(in: message) || message.hasPrefix("CONNECT tunnel failed") {
                message += " (the proxy, from \(proxy.variable))"
            }
            if code == CURLE_OPERATION_TIMEDOUT, neverLeftTheQueue {
                return .failure(HTTPError(.queued, "no connection free for the request before its deadline (nothing sent): \(message)"))
            }
            return .failure(HTTPError(Self.classify(code), message))
        }
        var status = 0
        var version = 0
        _ = mw_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        _ = mw_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        let versionText = version == Int(CURL_HTTP_VERSION_2_0) ? "2" : version == Int(CURL_HTTP_VERSION_1_0) ? "1.0" : "1.1"
        return .success(HTTPResponse(status: status, rawHeaders: responseHeaders, body: responseBody, httpVersion: versionText))
    }

    /// The transfer never left libcurl's queue: no name was looked up for it (that comes after a connection is
    /// found or allowed to open) and no request was sent (pre-transfer is reached by every transfer that starts
    /// sending, on a new connection or a reused one). A transfer whose own connection hangs has a lookup time.
    private var neverLeftTheQueue: Bool {
        var lookup: curl_off_t = 0
        var pretransfer: curl_off_t = 0
        _ = mw_easy_getinfo_off(easy, CURLINFO_NAMELOOKUP_TIME_T, &lookup)
        _ = mw_easy_getinfo_off(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer)
        return lookup == 0 && pretransfer == 0
    }

    /// The request has a connection (new and set up, or reused) and has begun to be sent: libcurl records the
    /// pre-transfer time only then.
    var hasConnection: Bool {
        var pretransfer: curl_off_t = 0
        _ = mw_easy_getinfo_off(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer)
        return pretransfer > 0
    }

    /// New connections this transfer opened (0 when it reused one).
    var connectionsOpened: Int {
        var count = 0
        _ = mw_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &count)
        return count
    }

    static func classify(_ code: CURLcode) -> HTTPError.Code {
        switch code {
        case CURLE_OPERATION_TIMEDOUT: .timeout
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT: .connect
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM,
             CURLE_SSL_CIPHER, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            .tls
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL: .invalidRequest
        default: .transport
        }
    }
}

/// CURLOPT_WRITEFUNCTION: append body bytes to the transfer named by `userdata`.
private func curlWriteBody(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let userdata else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    // "If that amount differs from the amount passed to your callback function, it signals an error condition to the
    // library. This causes the transfer to get aborted and the libcurl function used returns CURLE_WRITE_ERROR."
    guard transfer.responseBody.count + length <= CurlTransfer.maxResponseBytes else {
        transfer.responseTooLarge = true
        return 0
    }
    buffer.withMemoryRebound(to: UInt8.self, capacity: length) {
        transfer.responseBody.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}

/// CURLOPT_HEADERFUNCTION: one header line per call, kept raw (parsed only if someone reads the
/// headers); a status line starts a new header block (an interim 100 or a redirect's headers are dropped).
private func curlWriteHeader(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let userdata else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    buffer.withMemoryRebound(to: UInt8.self, capacity: length) { start in
        let line = UnsafeBufferPointer(start: start, count: length)
        if length >= 5, line[0] == 0x48, line[1] == 0x54, line[2] == 0x54, line[3] == 0x50, line[4] == 0x2F {  // "HTTP/"
            transfer.responseHeaders.removeAll(keepingCapacity: true)
            return
        }
        transfer.responseHeaders.append(contentsOf: line)
    }
    return length
}

extension Duration {
    /// Whole milliseconds, at least 1.
    var milliseconds: Int {
        max(1, Int(wholeMilliseconds))
    }
}
