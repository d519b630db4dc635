import CCurl
import Foundation

/// `curl_global_init` exactly once, before the first handle (libcurl: "not thread safe").
private let curlGlobalInit: Void = {
    _ = curl_global_init(Int(CURL_GLOBAL_DEFAULT))
}()

/// An HTTP client over one libcurl multi handle driven by one dedicated thread. HTTP/2 over
/// TLS (ALPN, HTTP/1.1 fallback), streams multiplexed on long-lived connections, up to
/// `maxInFlight` transfers at once; callers `await` results. TLS verification is always on.
public final class HTTPClient: @unchecked Sendable {
    public let configuration: HTTPClientConfiguration
    private let multi: UnsafeMutableRawPointer
    /// A combined CA file (system bundle + `caFile`), written once; curl reads it by path.
    private let caBundlePath: String?
    private let lock = NSLock()
    private var queued: [(HTTPRequest, CheckedContinuation<HTTPResponse, any Error>)] = []
    private var running: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    private var stopping = false
    private var opened = 0
    private let finished = DispatchSemaphore(value: 0)

    /// Creates the client and starts its driver thread.
    public init(configuration: HTTPClientConfiguration = .init()) throws(HTTPError) {
        _ = curlGlobalInit
        self.configuration = configuration
        if let caFile = configuration.caFile {
            // CAINFO would *replace* the system store; trust both by handing curl one combined bundle.
            guard let extra = FileManager.default.contents(atPath: caFile) else {
                throw HTTPError(.invalidRequest, "cannot read CA file \(caFile)")
            }
            let system = FileManager.default.contents(atPath: "/etc/ssl/certs/ca-certificates.crt") ?? Data()
            let path = NSTemporaryDirectory() + "medication-worker-ca-\(getpid())-\(UUID().uuidString.prefix(8)).pem"
            guard FileManager.default.createFile(atPath: path, contents: system + Data("\n".utf8) + extra,
                                                 attributes: [.posixPermissions: 0o600]) else {
                throw HTTPError(.invalidRequest, "cannot write the combined CA bundle to \(path)")
            }
            caBundlePath = path
        } else {
            caBundlePath = nil
        }
        guard let multi = curl_multi_init() else { throw HTTPError(.invalidRequest, "curl_multi_init failed") }
        self.multi = multi
        _ = mw_multi_setopt_long(multi, CURLMOPT_PIPELINING, 2 /* CURLPIPE_MULTIPLEX */)
        _ = mw_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, configuration.maxStreamsPerConnection)
        // PIPEWAIT makes transfers wait for the first connection's ALPN: on HTTP/2 they multiplex
        // (a new connection only past MAX_CONCURRENT_STREAMS); on HTTP/1.1 they may use up to
        // maxInFlight connections instead of queueing behind one.
        _ = mw_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, max(1, configuration.maxInFlight))
        let thread = Thread { [self] in drive(); finished.signal() }
        thread.name = "http-multi"
        thread.start()
    }

    deinit {
        shutdown()
        curl_multi_cleanup(multi)
        if let caBundlePath { try? FileManager.default.removeItem(atPath: caBundlePath) }
    }

    /// Connections opened so far (each TLS handshake counts once).
    public var connectionsOpened: Int { lock.withLock { opened } }

    /// Performs one request. Throws `HTTPError` when no HTTP response arrived.
    public func execute(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        do {
            return try await withCheckedThrowingContinuation { continuation in
                let accepted = lock.withLock { () -> Bool in
                    guard !stopping else { return false }
                    queued.append((request, continuation))
                    return true
                }
                if accepted {
                    curl_multi_wakeup(multi)
                } else {
                    continuation.resume(throwing: HTTPError(.shutdown, "HTTP client is shut down"))
                }
            }
        } catch let error as HTTPError {
            throw error
        } catch {
            throw HTTPError(.transport, "\(error)")
        }
    }

    /// Fails queued and running requests with `.shutdown` and stops the driver thread. Idempotent.
    public func shutdown() {
        let wasRunning = lock.withLock { () -> Bool in
            defer { stopping = true }
            return !stopping
        }
        guard wasRunning else { return }
        curl_multi_wakeup(multi)
        finished.wait()
    }

    /// The driver loop: admit queued requests up to maxInFlight, perform, harvest, poll.
    private func drive() {
        var stillRunning: Int32 = 0
        while true {
            let (admit, stop) = lock.withLock { () -> ([(HTTPRequest, CheckedContinuation<HTTPResponse, any Error>)], Bool) in
                if stopping { return ([], true) }
                let room = max(0, configuration.maxInFlight - running.count)
                let batch = Array(queued.prefix(room))
                queued.removeFirst(batch.count)
                return (batch, false)
            }
            if stop { break }
            for (request, continuation) in admit {
                do {
                    let transfer = try CurlTransfer(request: request, configuration: configuration, caBundlePath: caBundlePath,
                                                    continuation: continuation)
                    lock.withLock { running[transfer.easy] = transfer }
                    curl_multi_add_handle(multi, transfer.easy)
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            curl_multi_perform(multi, &stillRunning)
            harvest()
            var ready: Int32 = 0
            curl_multi_poll(multi, nil, 0, 1000, &ready)
        }
        // Shutting down: fail everything still queued or running.
        let (pending, active) = lock.withLock { () -> ([CheckedContinuation<HTTPResponse, any Error>], [CurlTransfer]) in
            defer { queued.removeAll(); running.removeAll() }
            return (queued.map(\.1), Array(running.values))
        }
        for transfer in active {
            curl_multi_remove_handle(multi, transfer.easy)
            transfer.continuation.resume(throwing: HTTPError(.shutdown, "HTTP client shut down during the request"))
        }
        for continuation in pending { continuation.resume(throwing: HTTPError(.shutdown, "HTTP client is shut down")) }
    }

    private func harvest() {
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            curl_multi_remove_handle(multi, easy)
            guard let transfer = lock.withLock({ running.removeValue(forKey: easy) }) else { continue }
            let connections = transfer.connectionsOpened
            if connections > 0 { lock.withLock { opened += connections } }
            switch transfer.finish(code) {
            case .success(let response): transfer.continuation.resume(returning: response)
            case .failure(let error): transfer.continuation.resume(throwing: error)
            }
        }
    }
}
