import Foundation

/// A threaded HTTPS server that offers only `http/1.1` in ALPN (Python's standard library, Debian's python3): a thread
/// per connection, one request at a time on each; TLS handshakes one at a time in its accept loop, each
/// `handshakeDelay` longer, as the usual Python recipe's are on a busy machine (its listen backlog is 5). It answers
/// every POST as FCM answers a good send; a body naming a `slow{ms}-` token is answered after that many milliseconds.
public final class ThreadedHTTP1Server: Sendable {
    public let port: UInt16
    public let directory: String
    private let process = Process()

    public init(handshakeDelay: Duration = .milliseconds(30), fixtures: TLSFixtures = .shared) async throws {
        port = FreePort.next()
        directory = NSTemporaryDirectory() + "mw-h1-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Self.script.write(toFile: "\(directory)/server.py", atomically: true, encoding: .utf8)
        let delay = Double(handshakeDelay.components.seconds) + Double(handshakeDelay.components.attoseconds) / 1e18
        try await Nginx.launch(process, binary: "/usr/bin/python3",
                         arguments: ["\(directory)/server.py", String(port), "\(fixtures.directory)/server.pem",
                                     "\(fixtures.directory)/server.key", String(delay), "\(directory)/connections"],
                         port: port, failure: "the threaded HTTP/1.1 server did not start")
    }

    deinit { stop() }

    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }

    /// Connections accepted so far (each a TLS handshake).
    public var connectionsAccepted: Int {
        Int((try? String(contentsOfFile: "\(directory)/connections", encoding: .utf8)) ?? "") ?? 0
    }

    /// `https://127.0.0.1:PORT`: an address, as `FCM_BASE_URL` names a server behind a private resolver or a proxy.
    public var url: String { "https://127.0.0.1:\(port)" }

    static let script = #"""
        import http.server, re, socketserver, ssl, sys, time

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                slow = re.search(rb'"token":"slow(\d+)-', body)
                if slow: time.sleep(int(slow.group(1)) / 1000)
                answer = b'{"name":"projects/test-project/messages/1"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            # The usual recipe: the listening socket is wrapped, so each handshake runs in the accept loop, one at a
            # time; the listen backlog is socketserver's default (5).
            daemon_threads = True
            accepted = 0
            def get_request(self):
                time.sleep(delay)  # the handshake's cost on a busy server
                request = super().get_request()
                Server.accepted += 1
                with open(counted, "w") as f: f.write(str(Server.accepted))
                return request

        port, certificate, key, delay, counted = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        context.set_alpn_protocols(["http/1.1"])
        server = Server(("127.0.0.1", port), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        server.serve_forever()
        """#
}
