import CCurl
import Foundation

/// One request on one easy handle. Owns the handle, its header list and the response buffers;
/// they live exactly as long as libcurl uses them (until the transfer is removed from the multi).
final class CurlTransfer {
    let easy: UnsafeMutableRawPointer
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    var responseBody: [UInt8] = []
    var responseHeaders: [String: String] = [:]
    let continuation: CheckedContinuation<HTTPResponse, any Error>

    init(request: HTTPRequest, configuration: HTTPClientConfiguration, caBundlePath: String?,
         continuation: CheckedContinuation<HTTPResponse, any Error>) throws(HTTPError) {
        guard let easy = curl_easy_init() else { throw HTTPError(.invalidRequest, "curl_easy_init failed") }
        self.easy = easy
        self.continuation = continuation
        try configure(request, configuration, caBundlePath)
    }

    deinit {
        curl_easy_cleanup(easy)
        if let headerList { curl_slist_free_all(headerList) }
    }

    private func check(_ code: CURLcode, _ what: String) throws(HTTPError) {
        guard code == CURLE_OK else {
            throw HTTPError(.invalidRequest, "\(what): \(String(cString: curl_easy_strerror(code)))")
        }
    }

    private func configure(_ request: HTTPRequest, _ configuration: HTTPClientConfiguration, _ caBundlePath: String?) throws(HTTPError) {
        try check(mw_easy_setopt_cstr(easy, CURLOPT_URL, request.url), "URL")
        try check(mw_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1), "NOSIGNAL")
        // HTTP/2 by ALPN on TLS, HTTP/1.1 otherwise; never prior knowledge.
        try check(mw_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)), "HTTP_VERSION")
        // Wait for an existing connection to multiplex on rather than opening another.
        try check(mw_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1), "PIPEWAIT")
        try check(mw_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "SSL_VERIFYPEER")
        try check(mw_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "SSL_VERIFYHOST")
        if let caBundlePath {
            // CAINFO replaces the default store, so this file holds the system bundle plus the extra CA.
            try check(mw_easy_setopt_cstr(easy, CURLOPT_CAINFO, caBundlePath), "CAINFO")
        }
        try check(mw_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeout.milliseconds), "CONNECTTIMEOUT")
        try check(mw_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, (request.timeout ?? configuration.requestTimeout).milliseconds), "TIMEOUT")
        try check(errorBuffer.withUnsafeMutableBytes { mw_easy_setopt_ptr(easy, CURLOPT_ERRORBUFFER, $0.baseAddress) }, "ERRORBUFFER")

        switch request.method {
        case "GET": break
        case "POST":
            try check(mw_easy_setopt_long(easy, CURLOPT_POST, 1), "POST")
        default:
            try check(mw_easy_setopt_cstr(easy, CURLOPT_CUSTOMREQUEST, request.method), "CUSTOMREQUEST")
        }
        if request.method != "GET" || !request.body.isEmpty {
            // POSTFIELDSIZE first, then COPYPOSTFIELDS: libcurl copies exactly that many bytes.
            try check(mw_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, request.body.count), "POSTFIELDSIZE")
            var body = request.body
            if body.isEmpty { body = [0] }
            try check(body.withUnsafeMutableBytes { mw_easy_setopt_ptr(easy, CURLOPT_COPYPOSTFIELDS, $0.baseAddress) }, "COPYPOSTFIELDS")
        }
        var headers = request.headers
        if headers.keys.contains(where: { $0.lowercased() == "expect" }) == false { headers["Expect"] = "" }
        for (name, value) in headers {
            // "Name:" with an empty value removes a header curl would add (Expect: 100-continue).
            headerList = curl_slist_append(headerList, value.isEmpty ? "\(name):" : "\(name): \(value)")
        }
        try check(mw_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList), "HTTPHEADER")

        let me = Unmanaged.passUnretained(self).toOpaque()
        try check(mw_easy_setopt_ptr(easy, CURLOPT_PRIVATE, me), "PRIVATE")
        try check(mw_easy_setopt_ptr(easy, CURLOPT_WRITEDATA, me), "WRITEDATA")
        try check(mw_easy_setopt_callback(easy, CURLOPT_WRITEFUNCTION, curlWriteBody), "WRITEFUNCTION")
        try check(mw_easy_setopt_ptr(easy, CURLOPT_HEADERDATA, me), "HEADERDATA")
        try check(mw_easy_setopt_callback(easy, CURLOPT_HEADERFUNCTION, curlWriteHeader), "HEADERFUNCTION")
    }

    /// Builds the response or the error once libcurl reports the transfer done.
    func finish(_ code: CURLcode) -> Result<HTTPResponse, HTTPError> {
        guard code == CURLE_OK else {
            let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            let message = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            return .failure(HTTPError(Self.classify(code), message))
        }
        var status = 0
        var version = 0
        _ = mw_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        _ = mw_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        let versionText = version == Int(CURL_HTTP_VERSION_2_0) ? "2" : version == Int(CURL_HTTP_VERSION_1_0) ? "1.0" : "1.1"
        return .success(HTTPResponse(status: status, headers: responseHeaders, body: responseBody, httpVersion: versionText))
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
    buffer.withMemoryRebound(to: UInt8.self, capacity: length) {
        transfer.responseBody.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}

/// CURLOPT_HEADERFUNCTION: one header line per call; a status line starts a new header block.
/// Parsed on bytes (this runs for every header of every response).
private func curlWriteHeader(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let userdata else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    buffer.withMemoryRebound(to: UInt8.self, capacity: length) { start in
        let line = UnsafeBufferPointer(start: start, count: length)
        if length >= 5, line[0] == 0x48, line[1] == 0x54, line[2] == 0x54, line[3] == 0x50, line[4] == 0x2F {  // "HTTP/"
            transfer.responseHeaders = [:]
            return
        }
        guard let colon = line.firstIndex(of: 0x3A) else { return }
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        var valueStart = colon + 1
        var valueEnd = length
        while valueStart < valueEnd, isSpace(line[valueStart]) { valueStart += 1 }
        while valueEnd > valueStart, isSpace(line[valueEnd - 1]) { valueEnd -= 1 }
        let name = String(decoding: line[0..<colon].lazy.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
        transfer.responseHeaders[name] = String(decoding: line[valueStart..<valueEnd], as: UTF8.self)
    }
    return length
}

extension Duration {
    /// Whole milliseconds, at least 1.
    var milliseconds: Int {
        max(1, Int(components.seconds) * 1000 + Int(components.attoseconds / 1_000_000_000_000_000))
    }
}
