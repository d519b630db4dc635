import CMicroHTTPD
import FoundationEssentials
import Glibc
import Synchronization

/// An HTTP/1.1 server over libmicrohttpd (the only importer of it): thread per connection or one
/// epoll thread (`HTTPServerOptions`), optional TLS. Used by the health endpoint, the FCM emulator and the test fakes.
///
/// `@unchecked Sendable` because it owns a C handle: the `MHD_Daemon` pointer and the counters
/// beside it are read and written only under `lock`; libmicrohttpd's own threads reach `self`
/// through an unretained context pointer that lives as long as the daemon.
public final class HTTPServer: @unchecked Sendable {
    /// The handler runs on libmicrohttpd's threads and may block (it has its own thread).
    public typealias Handler = @Sendable (HTTPServerRequest) -> HTTPServerResponse

    private let lock = Mutex(())
    private var daemon: OpaquePointer?
    private var accepted = 0
    fileprivate let handler: Handler
    fileprivate let screen: (@Sendable (HTTPServerRequest) -> HTTPServerResponse?)?
    fileprivate let maxBodyBytes: Int
    /// Keeps PEM strings alive as long as the daemon might read them.
    private let tlsStrings: (key: UnsafeMutablePointer<CChar>, cert: UnsafeMutablePointer<CChar>)?
    /// The bound port.
    public private(set) var port: UInt16 = 0
    public let host: String

    /// Starts listening at once; port 0 picks a free port.
    public init(host: String = "127.0.0.1", port: UInt16 = 0, tls: TLSIdentity? = nil, options: HTTPServerOptions = HTTPServerOptions(),
                handler: @escaping Handler) throws(HTTPServerError) {
        self.handler = handler
        screen = options.screen
        maxBodyBytes = min(max(options.maxBodyBytes, 0), HTTPServerOptions.bodyBytesHardCap)
        self.host = host
        if let tls {
            guard mw_mhd_tls_supported() != 0 else { throw HTTPServerError("libmicrohttpd was built without TLS support") }
            tlsStrings = (strdup(tls.privateKeyPEM), strdup(tls.certificatePEM))
        } else {
            tlsStrings = nil
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        let strings = tlsStrings
        let isV6 = host.contains(":")
        let flags = options.threading == .epoll ? mw_mhd_flags_epoll(isV6 ? 1 : 0) : mw_mhd_flags_threaded(isV6 ? 1 : 0)
        let limits = (timeout: UInt32(clamping: options.connectionTimeoutSeconds), total: UInt32(clamping: options.connectionLimit ?? 0),
                      perIP: UInt32(clamping: options.perIPConnectionLimit ?? 0))
        // One start call for either address family; only the sockaddr differs.
        func start<Address>(_ address: inout Address) -> OpaquePointer? {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    mw_mhd_start(flags, $0, accessHandler, context, requestCompleted, nil, connectionNotified, context,
                                 strings?.key, strings?.cert, limits.timeout, limits.total, limits.perIP)
                }
            }
        }
        let started: OpaquePointer?
        if isV6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else {
                Self.free(tlsStrings)
                throw HTTPServerError("\(host) is not an IPv6 address")
            }
            started = start(&address)
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            let resolved = host == "localhost" ? "127.0.0.1" : host
            guard inet_pton(AF_INET, resolved, &address.sin_addr) == 1 else {
                Self.free(tlsStrings)
                throw HTTPServerError("\(host) is not an IPv4 address")
            }
            started = start(&address)
        }
        guard let started else {
            Self.free(tlsStrings)
            throw HTTPServerError("cannot listen on \(isV6 ? "[\(host)]" : host):\(port) (address in use, or the TLS identity is invalid)")
        }
        daemon = started
        self.port = mw_mhd_port(started)
    }

    deinit {
        stop()
        Self.free(tlsStrings)
    }

    /// TCP connections accepted so far.
    public var connectionsAccepted: Int { lock.withLock { _ in accepted } }

    /// Stops listening and closes connections; idempotent.
    public func stop() {
        let running = lock.withLock { _ -> OpaquePointer? in
            defer { daemon = nil }
            return daemon
        }
        if let running { MHD_stop_daemon(running) }
    }

    fileprivate func noteConnection() { lock.withLock { _ in accepted += 1 } }

    private static func free(_ strings: (key: UnsafeMutablePointer<CChar>, cert: UnsafeMutablePointer<CChar>)?) {
        guard let strings else { return }
        Glibc.free(strings.key)
        Glibc.free(strings.cert)
    }
}

/// Per-request state kept in libmicrohttpd's `con_cls` between access-handler calls.
private final class PendingRequest {
    var body: [UInt8] = []
    /// Answered 413 while its body was arriving: the rest is dropped, unread into memory.
    var refused = false
}

private func server(_ cls: UnsafeMutableRawPointer?) -> HTTPServer {
    Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue()
}

/// MHD_AccessHandlerCallback: called first with no data, then with body chunks, then once with none left.
private func accessHandler(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
                           _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
                           _ uploadSize: UnsafeMutablePointer<Int>?, _ state: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> MHD_Result {
    guard let state, let connection else { return mw_mhd_no() }
    let owner = server(cls)
    let methodText = method.map { String(cString: $0) } ?? "GET"
    let path = url.map { String(cString: $0) } ?? "/"
    guard let existing = state.pointee else {
        // The first call comes with the request line and headers only: a refused request is answered here, before
        // a byte of its body is read ("the access handler may queue a response on the first call", microhttpd.h);
        // libmicrohttpd then closes the connection instead of reading the rest.
        let pairs = headerPairs(connection)
        let head = HTTPServerRequest(method: methodText, path: path, headers: Dictionary(pairs, uniquingKeysWith: { first, _ in first }))
        if let screen = owner.screen, let response = screen(head) { return respond(connection, response) }
        if let response = RequestFraming.refusal(headers: pairs, maxBodyBytes: owner.maxBodyBytes) { return respond(connection, response) }
        state.pointee = Unmanaged.passRetained(PendingRequest()).toOpaque()
        return mw_mhd_yes()
    }
    let pending = Unmanaged<PendingRequest>.fromOpaque(existing).takeUnretainedValue()
    if let uploadSize, uploadSize.pointee > 0 {
        let count = uploadSize.pointee
        uploadSize.pointee = 0
        // A chunked body has no length up front: it is cut off (and the connection closed) once it passes the cap.
        guard !pending.refused, pending.body.count + count <= owner.maxBodyBytes else {
            pending.body = []
            if pending.refused { return mw_mhd_yes() }
            pending.refused = true
            return respond(connection, RequestFraming.bodyTooLarge(owner.maxBodyBytes))
        }
        if let uploadData {
            uploadData.withMemoryRebound(to: UInt8.self, capacity: count) {
                pending.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
            }
        }
        return mw_mhd_yes()
    }
    if pending.refused { return mw_mhd_yes() }
    let request = HTTPServerRequest(method: methodText, path: path, query: values(connection, mw_mhd_query_kind(), lowercase: false),
                                    headers: values(connection, mw_mhd_header_kind(), lowercase: true), body: pending.body)
    return respond(connection, owner.handler(request))
}

/// Every request header in order, names lower-cased, duplicates kept (the framing rules count them).
private func headerPairs(_ connection: OpaquePointer) -> [(name: String, value: String)] {
    final class Box { var pairs: [(name: String, value: String)] = [] }
    let box = Box()
    _ = MHD_get_connection_values(connection, mw_mhd_header_kind(), { cls, _, key, value in
        let box = Unmanaged<Box>.fromOpaque(cls!).takeUnretainedValue()
        if let key { box.pairs.append((String(cString: key).lowercased(), value.map { String(cString: $0) } ?? "")) }
        return mw_mhd_yes()
    }, Unmanaged.passUnretained(box).toOpaque())
    return withExtendedLifetime(box) { box.pairs }
}

/// Queues `response` on `connection`.
private func respond(_ connection: OpaquePointer, _ response: HTTPServerResponse) -> MHD_Result {
    let names = response.headers.keys.map { strdup($0) }
    let headerValues = response.headers.keys.map { strdup(response.headers[$0]!) }
    defer { names.forEach { free($0) }; headerValues.forEach { free($0) } }
    let constNames = names.map { UnsafePointer($0) }
    let constValues = headerValues.map { UnsafePointer($0) }
    return response.body.withUnsafeBytes { body in
        mw_mhd_respond(connection, UInt32(response.status), body.baseAddress, body.count, constNames, constValues, constNames.count)
    }
}

/// Collects header or query values of a connection.
private func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind, lowercase: Bool) -> [String: String] {
    final class Box { var values: [String: String] = [:]; var lowercase = false }
    let box = Box()
    box.lowercase = lowercase
    let pointer = Unmanaged.passUnretained(box).toOpaque()
    _ = MHD_get_connection_values(connection, kind, { cls, _, key, value in
        let box = Unmanaged<Box>.fromOpaque(cls!).takeUnretainedValue()
        if let key {
            let name = String(cString: key)
            box.values[box.lowercase ? name.lowercased() : name] = value.map { String(cString: $0) } ?? ""
        }
        return mw_mhd_yes()
    }, pointer)
    return withExtendedLifetime(box) { box.values }
}

/// MHD_RequestCompletedCallback: frees the per-request state.
private func requestCompleted(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
                              _ state: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_RequestTerminationCode) {
    guard let state, let existing = state.pointee else { return }
    Unmanaged<PendingRequest>.fromOpaque(existing).release()
    state.pointee = nil
}

/// MHD_NotifyConnectionCallback: counts accepted connections.
private func connectionNotified(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
                                _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_ConnectionNotificationCode) {
    if mw_mhd_is_connection_started(code) != 0 { server(cls).noteConnection() }
}
