import CCurl
import Crypto
import FoundationEssentials
import Glibc
import Synchronization
import TextSupport
import Threads

/// `curl_global_init` exactly once, before the first handle (libcurl: "not thread safe"). It initialises OpenSSL,
/// so OpenSSL is first told to keep its state until the process is gone (when nothing initialised it before).
private let curlGlobalInit: Void = {
    OpenSSLProcess.keepStateUntilExit()
    _ = curl_global_init(Int(CURL_GLOBAL_DEFAULT))
}()

/// An HTTP client over one libcurl multi handle driven by one dedicated thread. HTTP/2 over
/// TLS (ALPN, HTTP/1.1 fallback), streams multiplexed on long-lived connections, up to
/// `maxInFlight` transfers at once; callers `await` results. TLS verification is always on.
/// Easy handles are reused; the driver is woken only when it sleeps in `curl_multi_poll`.
public final class HTTPClient: Sendable {
    public let configuration: HTTPClientConfiguration
    private let multi: MultiHandle
    /// TLS sessions shared by every easy handle of this client (libcurl keeps them per easy handle otherwise), so a
    /// connection opened after a GOAWAY or at `maxConnectionAge` resumes the session of the one before it, whichever
    /// handle opens it: no certificate is sent, signed or verified again. Used by the driver thread only (no locks).
    private let share: ShareHandle
    /// What the TLS context callback keeps for this client (libcurl's new-session callback, the handshakes counted).
    private let tls: TLSState
    /// A combined CA file (system bundle + `caFile`), written once; curl reads it by path.
    /// The system's CAs plus `configuration.caFile`'s, when one is set.
    private let caBundle: CABundle?
    private let state = Mutex(State())
    /// The driver thread, until `shutdown` joins it.
    private let driverThread = Mutex<OSThread.Joinable?>(nil)

    /// Called once with a request's result, on the driver thread: it must be short and must not block.
    public typealias Completion = @Sendable (Result<HTTPResponse, HTTPError>) -> Void

    fileprivate struct Queued {
        var id: UInt64
        var request: HTTPRequest
        var completion: Completion
    }

    private struct State {
        var queued: [Queued] = []
        var cancelled: Set<UInt64> = []
        var cancelAllRequested = false
        var nextId: UInt64 = 0
        var stopping = false
        /// The driver is in (or about to enter) `curl_multi_poll`: a new request must wake it.
        var polling = false
        var opened = 0
    }

    /// Creates the client and starts its driver thread.
    public init(configuration: HTTPClientConfiguration = .init()) throws(HTTPError) {
        _ = curlGlobalInit
        self.configuration = configuration
        caBundle = try configuration.caFile.map { caFile throws(HTTPError) in try CABundle(extraCAFile: caFile) }
        guard let sharedSessions = curl_share_init() else { throw HTTPError(.invalidRequest, "curl_share_init failed") }
        guard mw_share_setopt_long(sharedSessions, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_SSL_SESSION.rawValue)) == CURLSHE_OK,
              let raw = curl_multi_init() else {
            curl_share_cleanup(sharedSessions)
            throw HTTPError(.invalidRequest, "curl_multi_init or sharing TLS sessions failed")
        }
        share = ShareHandle(raw: sharedSessions)
        multi = MultiHandle(raw: raw)
        tls = TLSState(userTimeoutMs: UInt32(clamping: configuration.stallTimeout.milliseconds),
                       cork: configuration.coalesceWrites)
        _ = mw_multi_setopt_long(raw, CURLMOPT_PIPELINING, 2 /* CURLPIPE_MULTIPLEX */)
        _ = mw_multi_setopt_long(raw, CURLMOPT_MAX_CONCURRENT_STREAMS, configuration.maxStreamsPerConnection)
        // PIPEWAIT makes transfers wait for the first connection's ALPN: on HTTP/2 they multiplex
        // (a new connection only past MAX_CONCURRENT_STREAMS); on HTTP/1.1 they may use up to
        // maxInFlight connections instead of queueing behind one.
        // Once a server is known to speak HTTP/2, the driver lowers this to what multiplexing needs
        // (`multiplexedHostConnections`).
        _ = mw_multi_setopt_long(raw, CURLMOPT_MAX_HOST_CONNECTIONS, max(1, configuration.maxInFlight))
        let driver = Driver(client: self)
        let thread = OSThread.startJoinable(name: "http-multi") { driver.run() }
        driverThread.withLock { $0 = thread }
    }

    deinit {
        shutdown()
        curl_multi_cleanup(multi.raw)
        // After the driver thread is joined: its easy handles, the share's users, are gone; and the multi handle's
        // cleanup has closed every connection, so no TLS context points at `tls` any more.
        let shareReleased = curl_share_cleanup(share.raw) == CURLSHE_OK
        assert(shareReleased, "an easy handle outlived the HTTP client's driver")
        mw_tls_state_release(tls.raw)
        tls.raw.deallocate()
    }

    /// Connections opened so far (each TLS handshake counts once).
    public var connectionsOpened: Int { state.withLock { $0.opened } }

    /// TLS handshakes so far: full ones, and ones that resumed an earlier connection's session.
    public var tlsHandshakes: TLSHandshakes {
        TLSHandshakes(full: Int(mw_tls_full_handshakes(tls.raw)), resumed: Int(mw_tls_resumed_handshakes(tls.raw)))
    }

    /// Performs one request. Throws `HTTPError` when no HTTP response arrived; `.cancelled` when the
    /// calling task is cancelled first (the request is abandoned; the server may have received it).
    public func execute(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        let id = nextId()
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPResponse, any Error>) in
                    start(request, id: id) { result in continuation.resume(with: result) }
                    // Cancelled before `start` queued it: the driver may already have dropped that cancellation as
                    // naming nothing, so it is asked again for the request now queued.
                    if Task.isCancelled { cancel(id) }
                }
            } onCancel: {
                cancel(id)
            }
        } catch let error as HTTPError {
            throw error
        } catch {
            throw HTTPError(.transport, "\(error)")
        }
    }

    /// Starts one request; `completion` gets its result on the driver thread. Returns the request's id (for `cancel`).
    @discardableResult
    public func start(_ request: HTTPRequest, completion: @escaping Completion) -> UInt64 {
        let id = nextId()
        start(request, id: id, completion: completion)
        return id
    }

    private func nextId() -> UInt64 {
        state.withLock { state in
            state.nextId &+= 1
            return state.nextId
        }
    }

    private func start(_ request: HTTPRequest, id: UInt64, completion: @escaping Completion) {
        // What libcurl is set up for (`CurlTransfer.prepare`): a HEAD would wait for a body that never comes, and a GET
        // with a body would leave the handle posting it again on its next plain GET.
        guard request.method == .post || (request.method == .get && request.body.isEmpty) else {
            completion(.failure(HTTPError(.invalidRequest, "\(request.method) with a \(request.body.count)-byte body: this client sends a GET without a body or a POST")))
            return
        }
        let (refused, wake) = state.withLock { state -> (HTTPError?, Bool) in
            if state.stopping { return (HTTPError(.shutdown, "HTTP client is shut down"), false) }
            if state.cancelled.remove(id) != nil { return (HTTPError(.cancelled, "request cancelled"), false) }
            state.queued.append(Queued(id: id, request: request, completion: completion))
            defer { state.polling = false }
            return (nil, state.polling)
        }
        if let refused {
            completion(.failure(refused))
        } else if wake {
            curl_multi_wakeup(multi.raw)
        }
    }

    /// Abandons one request: it completes with `.cancelled` (the server may have received it).
    public func cancel(_ id: UInt64) {
        state.withLock { _ = $0.cancelled.insert(id) }
        curl_multi_wakeup(multi.raw)
    }

    /// Abandons every queued and running request (a stop's deadline): each completes with `.cancelled`.
    public func cancelAll() {
        state.withLock { $0.cancelAllRequested = true }
        curl_multi_wakeup(multi.raw)
    }

    /// Fails queued and running requests with `.shutdown` and stops the driver thread. Idempotent.
    public func shutdown() {
        let wasRunning = state.withLock { state -> Bool in
            defer { state.stopping = true }
            return !state.stopping
        }
        guard wasRunning else { return }
        curl_multi_wakeup(multi.raw)
        // Joined, not signalled: when this returns the driver thread is gone, with everything it released on the way
        // out (its easy handles, OpenSSL's per-thread state), so nothing of it races the process's exit.
        driverThread.withLock { thread in
            defer { thread = nil }
            return thread
        }?.join()
    }

    /// The driver thread's side: everything here runs on that one thread.
    ///
    /// `@unchecked Sendable` by a documented invariant: it holds libcurl easy handles, which are not
    /// thread-safe, and is created, used and released on the driver thread only.
    private final class Driver: @unchecked Sendable {
        let client: HTTPClient
        var running: [UInt64: CurlTransfer] = [:]
        var idle: [CurlTransfer] = []
        /// An answer came over HTTP/2, and the host connection limit is the multiplexed one.
        var multiplexed = false
        /// CURLMOPT_MAX_HOST_CONNECTIONS as last set.
        var hostConnectionLimit: Int
        /// Transfers in progress to servers not known to multiplex (HTTP/1.1, or not answered yet): each may need a
        /// connection of its own.
        var unmultiplexedInFlight = 0
        /// The last URL found to go to a server known to multiplex.
        var lastMultiplexedURL = ""
        /// Servers (scheme://authority) that have answered, and whether over HTTP/2.
        var protocols: [Substring: Bool] = [:]
        /// Transfers in progress to servers that have not answered yet. Until a server's first answer tells whether
        /// it multiplexes, at most one connection's streams go to it: more would each open a connection of their own.
        var probing: [Substring: Int] = [:]
        /// The last URL found to go to a server already known (most requests go to one endpoint).
        var lastKnownURL = ""
        /// The queue's first request waits for its server's first answer (so the driver may sleep until one comes).
        var headWaitsForProtocol = false
        /// The queue's first request goes to a server not known to multiplex, and `connectingAtOnce` of its requests
        /// are still without a connection.
        var headWaitsForConnection = false

        /// Requests to servers not known to multiplex (HTTP/1.1, or not answered yet) that may be without a connection at
        /// once; the others wait in the queue. On HTTP/1.1 each request holds a connection, and with no bound each one
        /// in flight opened its own at once: 150 handshakes asked together of a threaded server that does them one at a
        /// time took seconds, some past the connect timeout, while quick answers free kept-alive connections within
        /// milliseconds. With it, connections open as fast as the server completes handshakes, quick answers' are
        /// reused, and a slow answer holds only its own.
        static let connectingAtOnce = 4
        /// Connections that requests to servers not known to multiplex left kept alive in the last turn: as many
        /// requests may start beside `connectingAtOnce`, each reusing one.
        var freedConnections = 0

        init(client: HTTPClient) {
            self.client = client
            hostConnectionLimit = max(1, client.configuration.maxInFlight)
        }

        /// What the driver takes from the shared state on each turn.
        private struct Turn {
            var admit: [Queued] = []
            /// Queued requests cancelled before they started: answered once the lock is released.
            var refused: [Queued] = []
            var cancelled: Set<UInt64> = []
            var cancelAll = false
            var stop = false
        }

        func run() {
            let multi = client.multi.raw
            var stillRunning: Int32 = 0
            while true {
                let turn = takeTurn()
                if turn.stop { break }
                // Outside the lock: a completion may start another request.
                for item in turn.refused { item.completion(.failure(HTTPError(.cancelled, "request cancelled"))) }
                abandon(turn.cancelAll ? Array(running.keys) : turn.cancelled.filter { running[$0] != nil }, multi)
                for item in turn.admit { admit(item, multi) }
                curl_multi_perform(multi, &stillRunning)
                harvest(multi)
                // What this turn wrote leaves now: one segment per connection.
                if client.configuration.coalesceWrites { TransferSockets.releaseAll(client.tls.raw) }
                // Sleep only when nothing is waiting to be admitted; requests queued meanwhile wake the poll.
                let sleep = client.state.withLock { state -> Bool in
                    let canAdmit = !state.queued.isEmpty && running.count < client.configuration.maxInFlight && !headWaitsForProtocol
                        && (!headWaitsForConnection || unmultiplexedRoom() > 0)
                    state.polling = !canAdmit && state.cancelled.isEmpty && !state.cancelAllRequested && !state.stopping
                    return state.polling
                }
                if sleep {
                    var ready: Int32 = 0
                    curl_multi_poll(multi, nil, 0, 1000, &ready)
                    client.state.withLock { $0.polling = false }
                }
            }
            failEverything(multi)
        }

        /// Takes cancellations and as many queued requests as there is room for; queued ones that were
        /// cancelled are handed back in `refused`, to be answered outside the lock.
        private func takeTurn() -> Turn {
            client.state.withLock { state -> Turn in
                if state.stopping { return Turn(stop: true) }
                var turn = Turn()
                turn.cancelAll = state.cancelAllRequested
                state.cancelAllRequested = false
                if turn.cancelAll {
                    turn.refused = state.queued
                    state.queued.removeAll()
                } else if !state.cancelled.isEmpty {
                    let cancelled = state.cancelled
                    turn.cancelled = cancelled
                    state.cancelled.removeAll()
                    state.queued.removeAll { item in
                        guard cancelled.contains(item.id) else { return false }
                        turn.refused.append(item)
                        return true
                    }
                }
                let room = max(0, client.configuration.maxInFlight - running.count)
                var admitted = 0
                var probes: [Substring: Int] = [:]
                var unmultiplexedRoom = state.queued.isEmpty ? 0 : self.unmultiplexedRoom()
                headWaitsForProtocol = false
                headWaitsForConnection = false
                freedConnections = 0
                for item in state.queued {
                    if admitted == room { break }
                    if let server = unknownServer(of: item.request.url) {
                        let inProgress = probing[server, default: 0] + probes[server, default: 0]
                        if inProgress >= max(1, client.configuration.maxStreamsPerConnection) {
                            headWaitsForProtocol = true
                            break
                        }
                        probes[server, default: 0] += 1
                    }
                    if !multiplexes(item.request.url) {
                        if unmultiplexedRoom == 0 {
                            headWaitsForConnection = true
                            break
                        }
                        unmultiplexedRoom -= 1
                    }
                    admitted += 1
                }
                turn.admit = Array(state.queued.prefix(admitted))
                state.queued.removeFirst(admitted)
                return turn
            }
        }

        /// Removes running transfers that were cancelled; a handle removed mid-transfer is discarded rather than reused.
        private func abandon(_ ids: [UInt64], _ multi: UnsafeMutableRawPointer) {
            for id in ids {
                guard let transfer = running.removeValue(forKey: id) else { continue }
                endProbe(transfer)
                endConnectionNeed(transfer, multi)
                curl_multi_remove_handle(multi, transfer.easy)
                transfer.complete(.failure(HTTPError(.cancelled, "request cancelled")))
            }
        }

        /// Starts one request on a reused (or new) easy handle.
        private func admit(_ item: Queued, _ multi: UnsafeMutableRawPointer) {
            do throws(HTTPError) {
                let transfer: CurlTransfer
                if let reused = idle.popLast() {
                    transfer = reused
                } else {
                    transfer = try CurlTransfer(configuration: client.configuration, caBundlePath: client.caBundle?.path,
                                                share: client.share.raw, tls: client.tls.raw)
                }
                try transfer.prepare(item.request, id: item.id, configuration: client.configuration, completion: item.completion)
                transfer.probing = unknownServer(of: item.request.url)
                if let probing = transfer.probing { self.probing[probing, default: 0] += 1 }
                if !multiplexes(item.request.url) {
                    transfer.needsOwnConnection = true
                    unmultiplexedInFlight += 1
                    // Before libcurl sees the transfer, so that it finds room for its connection.
                    updateHostConnectionLimit(multi)
                }
                running[item.id] = transfer
                curl_multi_add_handle(multi, transfer.easy)
            } catch {
                item.completion(.failure(error))
            }
        }

        /// `scheme://authority` of a URL: what libcurl keeps connections to.
        static func server(of url: String) -> Substring {
            guard let scheme = url.firstRange(of: "://") else { return url[...] }
            let rest = url[scheme.upperBound...]
            return url[..<(rest.firstIndex(of: "/") ?? url.endIndex)]
        }

        /// The server of `url` when it has not answered yet; nil once its protocol is known.
        private func unknownServer(of url: String) -> Substring? {
            if url == lastKnownURL { return nil }
            let server = Self.server(of: url)
            guard protocols[server] != nil else { return server }
            lastKnownURL = url
            return nil
        }

        /// Whether `url` goes to a server known to speak HTTP/2.
        private func multiplexes(_ url: String) -> Bool {
            if url == lastMultiplexedURL { return true }
            guard protocols[Self.server(of: url)] == true else { return false }
            lastMultiplexedURL = url
            return true
        }

        /// Requests that may start now to servers not known to multiplex: the connections freed in the last turn, and
        /// `connectingAtOnce` less the requests in progress still without a connection (one that reuses a kept-alive
        /// connection has it at once).
        private func unmultiplexedRoom() -> Int {
            guard unmultiplexedInFlight >= Self.connectingAtOnce else {
                return freedConnections + Self.connectingAtOnce - unmultiplexedInFlight
            }
            var connecting = 0
            for transfer in running.values where transfer.needsOwnConnection && !transfer.hasConnection {
                connecting += 1
            }
            return freedConnections + max(0, Self.connectingAtOnce - connecting)
        }

        /// A server's first answer: its protocol is known, and once any server speaks HTTP/2 the host connection limit
        /// is what multiplexing needs (servers answering HTTP/1.1 alone keep `maxInFlight`).
        private func learn(_ server: Substring, multiplexes: Bool, _ multi: UnsafeMutableRawPointer) {
            protocols[server] = multiplexes
            headWaitsForProtocol = false
            guard multiplexes else { return }
            multiplexed = true
            // Its transfers still in progress share its connections too.
            for transfer in running.values where transfer.needsOwnConnection && transfer.probing == server {
                transfer.needsOwnConnection = false
                unmultiplexedInFlight -= 1
            }
            updateHostConnectionLimit(multi)
        }

        /// CURLMOPT_MAX_HOST_CONNECTIONS is one limit for every host of the multi handle. Once a server speaks HTTP/2
        /// it is what multiplexing needs, but never below the transfers in progress to servers not known to multiplex:
        /// on HTTP/1.1 each request holds a connection, so under the multiplexed limit (2 at 100 in flight) two slow
        /// answers from an HTTP/1.1 server held every other request to it in libcurl's queue until they came.
        private func updateHostConnectionLimit(_ multi: UnsafeMutableRawPointer) {
            let limit = multiplexed ? max(client.configuration.multiplexedHostConnections, unmultiplexedInFlight)
                                    : max(1, client.configuration.maxInFlight)
            guard limit != hostConnectionLimit else { return }
            hostConnectionLimit = limit
            _ = mw_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, limit)
        }

        /// A transfer that needed a connection of its own is over.
        private func endConnectionNeed(_ transfer: CurlTransfer, _ multi: UnsafeMutableRawPointer) {
            guard transfer.needsOwnConnection else { return }
            transfer.needsOwnConnection = false
            unmultiplexedInFlight -= 1
            updateHostConnectionLimit(multi)
        }

        private func endProbe(_ transfer: CurlTransfer) {
            guard let server = transfer.probing else { return }
            transfer.probing = nil
            probing[server, default: 1] -= 1
            if probing[server] == 0 { probing.removeValue(forKey: server) }
            headWaitsForProtocol = false
        }

        /// Shutting down: fail everything still queued or running.
        private func failEverything(_ multi: UnsafeMutableRawPointer) {
            let pending = client.state.withLock { state in
                defer { state.queued.removeAll() }
                return state.queued
            }
            for transfer in running.values {
                transfer.needsOwnConnection = false
                curl_multi_remove_handle(multi, transfer.easy)
                transfer.complete(.failure(HTTPError(.shutdown, "HTTP client shut down during the request")))
            }
            running.removeAll()
            idle.removeAll()
            for item in pending { item.completion(.failure(HTTPError(.shutdown, "HTTP client is shut down"))) }
        }

        /// Times a request the server never processed is sent again after libcurl gave up on it (5 retries, on 7.88
        /// counted over the handle's whole life): both releases need it under GOAWAY churn
        /// (HTTP2Tests.goawayEveryTenRequests_refusedStreamsAreSentAgainUntilAnswered: 811 of 2,000 sends failed
        /// without it on 7.88, 907 on 8.14). The bound keeps a server that refuses everything from holding a slot
        /// forever: the send then fails as a transport error and is retried later.
        static let maxResends = 20

        private func harvest(_ multi: UnsafeMutableRawPointer) {
            var remaining: Int32 = 0
            var opened = 0
            while let message = curl_multi_info_read(multi, &remaining) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
                let code = message.pointee.data.result
                curl_multi_remove_handle(multi, easy)
                var pointer: UnsafeMutableRawPointer?
                _ = mw_easy_getinfo_ptr(easy, CURLINFO_PRIVATE, &pointer)
                guard let pointer else { continue }
                let transfer = Unmanaged<CurlTransfer>.fromOpaque(pointer).takeUnretainedValue()
                guard running[transfer.id] != nil else { continue }
                opened += transfer.connectionsOpened
                if code != CURLE_OK, transfer.isUnprocessedRetryable(code), transfer.resends < Self.maxResends {
                    // The server closed the connection (GOAWAY, or it died) before processing this request, and
                    // libcurl's own retries found only doomed connections: send it again on a fresh one.
                    transfer.resends += 1
                    transfer.resetResponse()
                    curl_multi_add_handle(multi, easy)
                    continue
                }
                running.removeValue(forKey: transfer.id)
                // The caller has its answer first; what the answer tells the driver (a connection freed, a server's
                // protocol) matters from the next turn's admissions on.
                let result = transfer.finish(code)
                if transfer.needsOwnConnection, case .success = result { freedConnections += 1 }
                if let server = transfer.probing, case .success(let response) = result {
                    learn(server, multiplexes: response.httpVersion == "2", multi)
                }
                endProbe(transfer)
                endConnectionNeed(transfer, multi)
                idle.append(transfer)
            }
            if opened > 0 { client.state.withLock { $0.opened += opened } }
        }
    }
}

/// The client's `mw_tls_state`, allocated with it and released in its `deinit`. The driver thread's TLS callbacks write
/// it; other threads only read its counts, with the shim's atomic loads.
private struct TLSState: @unchecked Sendable {
    let raw: UnsafeMutablePointer<mw_tls_state>

    init(userTimeoutMs: UInt32, cork: Bool) {
        raw = .allocate(capacity: 1)
        raw.initialize(to: mw_tls_state())
        raw.pointee.user_timeout_ms = userTimeoutMs
        raw.pointee.cork = cork ? 1 : 0
    }
}

/// The share handle's pointer: set on easy handles and used by libcurl on the driver thread only; released in `deinit`.
private struct ShareHandle: @unchecked Sendable {
    let raw: UnsafeMutableRawPointer
}

/// The multi handle's pointer, shared by callers (only `curl_multi_wakeup`, which libcurl allows from any thread) and the driver.
/// `@unchecked Sendable` because it is a C handle whose only cross-thread use is that documented call.
private struct MultiHandle: @unchecked Sendable {
    let raw: UnsafeMutableRawPointer
}
