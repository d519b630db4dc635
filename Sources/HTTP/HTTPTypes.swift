import ErrorCodes

/// An HTTP request method: the common ones by name, any other through a string literal (as in
/// swift-http-types, a struct rather than a closed enum, so an extension method stays expressible).
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public var description: String { rawValue }

    public static let get = HTTPMethod(rawValue: "GET")
    public static let post = HTTPMethod(rawValue: "POST")
}

/// One HTTP request.
public struct HTTPRequest: Sendable {
    public var method: HTTPMethod
    public var url: String
    public var headers: [String: String]
    public var body: [UInt8]
    /// nil = the client's `requestTimeout`.
    public var timeout: Duration?

    public init(method: HTTPMethod = .get, url: String, headers: [String: String] = [:], body: [UInt8] = [], timeout: Duration? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// A complete HTTP response.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var body: [UInt8]
    /// `"2"` or `"1.1"` (as negotiated by ALPN).
    public var httpVersion: String
    private var rawHeaders: [UInt8]
    private var parsedHeaders: [String: String]?

    public init(status: Int, headers: [String: String], body: [UInt8], httpVersion: String) {
        self.status = status
        self.body = body
        self.httpVersion = httpVersion
        rawHeaders = []
        parsedHeaders = headers
    }

    /// A response whose header block (`Name: value\r\n` lines of the final response) is parsed only when read:
    /// a successful send never looks at its headers.
    init(status: Int, rawHeaders: [UInt8], body: [UInt8], httpVersion: String) {
        self.status = status
        self.body = body
        self.httpVersion = httpVersion
        self.rawHeaders = rawHeaders
        parsedHeaders = nil
    }

    /// Header names lower-cased; a repeated header keeps its last value.
    public var headers: [String: String] {
        get { parsedHeaders ?? Self.parse(rawHeaders) }
        set { parsedHeaders = newValue }
    }

    private static func parse(_ raw: [UInt8]) -> [String: String] {
        var headers: [String: String] = [:]
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        for line in raw.split(separator: 0x0A) {
            guard let colon = line.firstIndex(of: 0x3A) else { continue }
            var valueStart = colon + 1
            var valueEnd = line.endIndex
            while valueStart < valueEnd, isSpace(line[valueStart]) { valueStart += 1 }
            while valueEnd > valueStart, isSpace(line[valueEnd - 1]) { valueEnd -= 1 }
            let name = String(decoding: line[line.startIndex..<colon].lazy.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
            headers[name] = String(decoding: line[valueStart..<valueEnd], as: UTF8.self)
        }
        return headers
    }
}

/// Settings of an `HTTPClient`.
public struct HTTPClientConfiguration: Sendable {
    /// Requests in flight at once; more wait in the client's queue.
    public var maxInFlight: Int
    public var connectTimeout: Duration
    public var requestTimeout: Duration
    /// Extra PEM certificates to trust *in addition to* the system's. Verification is always on.
    public var caFile: String?
    /// The most of `caFile` read into memory: a private CA is a few KB, a whole bundle (Debian's) about 220 KB.
    public static let maxCAFileBytes = 1024 * 1024
    /// What a CA file weighs, for the message that refuses a larger one.
    public static let typicalCAFileSize = "a CA certificate is a few KB, a whole bundle a few hundred KB"
    /// HTTP/2 streams per connection before another connection is opened (FCM allows about 100).
    public var maxStreamsPerConnection: Int
    /// Sent data unacknowledged this long drops the connection (TCP_USER_TIMEOUT): a silent peer is replaced.
    public var stallTimeout: Duration = .seconds(20)
    /// No connection is reused after this age (CURLOPT_MAXLIFETIME_CONN); the next request opens a new one.
    public var maxConnectionAge: Duration = .seconds(600)
    /// Each driver turn's writes leave as one TCP segment per connection (TCP_CORK, released at the end of every
    /// turn): an HTTP/2 send is then not two segments of its own. Off, every frame leaves as it is written.
    public var coalesceWrites = true

    /// Connections to one HTTP/2 host: enough streams for `maxInFlight`, and one more for the turnover after a
    /// GOAWAY. Past `maxStreamsPerConnection`, Debian 12's libcurl 7.88 opens a connection for every waiting transfer
    /// (HTTP2Tests.moreInFlightThanAConnectionsStreams_opensOnlyTheConnectionsMultiplexingNeeds: 151 without the bound;
    /// not needed on 8.14, which waits for a stream).
    public var multiplexedHostConnections: Int {
        (max(1, maxInFlight) + max(1, maxStreamsPerConnection) - 1) / max(1, maxStreamsPerConnection) + 1
    }

    public init(maxInFlight: Int = 100, connectTimeout: Duration = .seconds(10), requestTimeout: Duration = .seconds(30),
                caFile: String? = nil, maxStreamsPerConnection: Int = 100) {
        self.maxInFlight = maxInFlight
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
        self.caFile = caFile
        self.maxStreamsPerConnection = maxStreamsPerConnection
    }
}

/// A transport failure (no HTTP status was received).
public struct HTTPError: CodedError {
    public typealias Code = ErrorCode<HTTPError>

    public var code: Code
    /// libcurl's explanation (never includes request headers or body).
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

}

/// Percent-encoding for URL path segments, query values and form fields.
public enum PercentEncoding {
    /// `text` as one URL component: RFC 3986's unreserved characters stay, every other byte of its UTF-8 is
    /// percent-encoded.
    public static func component(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The coarse kinds of `HTTPError`.
extension ErrorCode where Family == HTTPError {
    /// Certificate not trusted, hostname mismatch, handshake failure.
    public static let tls = Self("tls")
    /// Could not resolve or connect.
    public static let connect = Self("connect")
    public static let timeout = Self("timeout")
    /// The deadline passed while the request waited inside libcurl for a connection (all busy, or one still being
    /// opened by another request): nothing was sent, and it says nothing against the server.
    public static let queued = Self("queued")
    /// Anything else on the wire (reset, protocol error).
    public static let transport = Self("transport")
    /// The client was shut down.
    public static let shutdown = Self("shutdown")
    /// The request itself is unusable (bad URL, bad configuration).
    public static let invalidRequest = Self("invalidRequest")
    /// The calling task was cancelled; the request was abandoned (the server may have received it).
    public static let cancelled = Self("cancelled")
}

/// TLS handshakes of a client's connections: `full` ones (certificates exchanged and verified) and `resumed` ones
/// (an earlier connection's session taken up again).
public struct TLSHandshakes: Sendable, Equatable {
    public var full: Int
    public var resumed: Int

    public init(full: Int, resumed: Int) {
        self.full = full
        self.resumed = resumed
    }
}
