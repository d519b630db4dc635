/// A request as the server's handler sees it (body complete).
public struct HTTPServerRequest: Sendable {
    /// "GET", "POST", ...
    public var method: String
    /// The URL path without the query string.
    public var path: String
    /// Query parameters, percent-decoded.
    public var query: [String: String]
    /// Header names lower-cased.
    public var headers: [String: String]
    /// The complete request body.
    public var body: [UInt8]

    /// A request (tests build these directly to call routing functions).
    public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }
}

/// The handler's answer.
public struct HTTPServerResponse: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON answer (`Content-Type: application/json`).
    public static func json(_ status: Int, _ text: String, headers: [String: String] = [:]) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: headers.merging(["Content-Type": "application/json"]) { old, _ in old },
                           body: Array(text.utf8))
    }

    /// A text answer.
    public static func text(_ status: Int, _ text: String, contentType: String = "text/plain; charset=utf-8") -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: ["Content-Type": contentType], body: Array(text.utf8))
    }
}

/// How a server threads, and what it takes before its handler runs. The defaults suit the emulator and the
/// test fakes (a thread per connection, handlers that may block, any method and body); the health endpoint,
/// which may face a network, is stricter.
public struct HTTPServerOptions: Sendable {
    /// How connections are served.
    public enum Threading: Sendable {
        /// A thread per connection: a handler may block without holding up the others.
        case threadPerConnection
        /// One internal thread polls every connection (epoll): a connection costs a descriptor, not a thread.
        /// Only for handlers that never block.
        case epoll
    }

    /// How connections are served (a thread each by default).
    public var threading: Threading
    /// A connection idle this long (seconds) is closed, a request still arriving included.
    public var connectionTimeoutSeconds: Int
    /// Most connections open at once (nil: libmicrohttpd's default); more are closed as soon as accepted.
    public var connectionLimit: Int?
    /// Most connections open at once from one IP address (nil: no limit).
    public var perIPConnectionLimit: Int?
    /// Called with the request line and headers (`body` empty) before any body is read; a response it returns is
    /// sent at once and the body is never read (nil: read the body, then call the handler).
    public var screen: (@Sendable (HTTPServerRequest) -> HTTPServerResponse?)?
    /// The largest request body kept in memory (0: no body at all). A request announcing more is answered 413 from its
    /// headers; a chunked body that grows past it is answered 413 as soon as it does. Never above `bodyBytesHardCap`.
    public var maxBodyBytes: Int

    /// The emulator's and the fakes' body cap: an FCM message or an OAuth assertion is a few KiB.
    public static let defaultMaxBodyBytes = 1 << 20
    /// The most any server keeps of one request's body, whatever it was told.
    public static let bodyBytesHardCap = 16 << 20

    /// The emulator's and fakes' defaults unless told otherwise: a thread per connection, 120 s, no limits, no screen,
    /// bodies up to 1 MiB.
    public init(threading: Threading = .threadPerConnection, connectionTimeoutSeconds: Int = 120, connectionLimit: Int? = nil,
                perIPConnectionLimit: Int? = nil, maxBodyBytes: Int = defaultMaxBodyBytes,
                screen: (@Sendable (HTTPServerRequest) -> HTTPServerResponse?)? = nil) {
        self.threading = threading
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.maxBodyBytes = min(max(maxBodyBytes, 0), Self.bodyBytesHardCap)
        self.screen = screen
    }
}

/// A certificate chain and key for TLS, PEM.
public struct TLSIdentity: Sendable {
    public var certificatePEM: String
    public var privateKeyPEM: String

    public init(certificatePEM: String, privateKeyPEM: String) {
        self.certificatePEM = certificatePEM
        self.privateKeyPEM = privateKeyPEM
    }
}

/// The server could not start.
public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    /// What failed, naming the address for bind errors.
    public var message: String
    /// An error with its message.
    public init(_ message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}
