import Foundation

/// Debian's nginx as an HTTP/2 + TLS stand-in for FCM (and its token endpoint), on a loopback port.
public final class Nginx: Sendable {
    public let port: UInt16
    public let directory: String
    private let process = Process()

    /// nil when the nginx binary is not installed (CI installs it).
    public static var binary: String? {
        ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// `keepaliveRequests`: requests per connection before nginx sends GOAWAY (connection turnover).
    /// `tlsProtocols`: nginx's `ssl_protocols` (Debian 12's nginx speaks TLSv1 to TLSv1.2 unless told);
    /// `sessionTickets`: nginx's `ssl_session_tickets` (without them and without a session cache, nothing resumes).
    /// `upstreamPort`: a loopback HTTP/1.1 server that answers `/held/…`, told nginx's client connection of each request
    /// (`X-Connection`).
    public init(certificatePEM: String, keyPEM: String, port: UInt16, keepaliveRequests: Int = 1_000_000,
                tlsProtocols: String = "TLSv1.2", sessionTickets: Bool = true, upstreamPort: UInt16? = nil) async throws {
        guard let binary = Self.binary else { throw TestSupportError("nginx is not installed") }
        self.port = port
        directory = NSTemporaryDirectory() + "mw-nginx-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory + "/logs", withIntermediateDirectories: true)
        try certificatePEM.write(toFile: "\(directory)/server.pem", atomically: true, encoding: .utf8)
        try keyPEM.write(toFile: "\(directory)/server.key", atomically: true, encoding: .utf8)
        try Self.configuration(port: port, directory: directory, keepaliveRequests: keepaliveRequests,
                               tlsProtocols: tlsProtocols, sessionTickets: sessionTickets, upstreamPort: upstreamPort).write(toFile: "\(directory)/nginx.conf", atomically: true, encoding: .utf8)
        try await Self.launch(process, binary: binary, arguments: ["-p", directory, "-c", "\(directory)/nginx.conf", "-g", "daemon off;"],
                        port: port, failure: "nginx did not start; see \(directory)/logs/error.log")
    }

    /// Starts a stand-in server in the background, its output discarded (its stderr appended to `stderrPath` when
    /// given), and returns once `port` accepts connections (within 5 s).
    static func launch(_ process: Process, binary: String, arguments: [String], port: UInt16, failure: String,
                       stderrPath: String? = nil) async throws {
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        if let stderrPath {
            _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: stderrPath) ?? FileHandle.nullDevice
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.runOneAtATime()
        for _ in 0..<100 {
            if canConnect(port) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestSupportError(failure)
    }

    deinit { stop() }

    public func stop() {
        if process.isRunning {
            process.terminate()
        }
    }

    /// Requests nginx answered, one access-log line each (`METHOD URI STATUS CONNECTION REUSED`: nginx's connection
    /// serial number, and `r` when that connection's TLS session was resumed, `.` when it was a full handshake).
    public var accessLog: [String] {
        ((try? String(contentsOfFile: "\(directory)/logs/access.log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The connections that carried requests, by nginx's serial number: whether each resumed a TLS session.
    public var connectionsResumed: [String: Bool] {
        var connections: [String: Bool] = [:]
        for line in accessLog {
            let fields = line.split(separator: " ")
            guard fields.count == 5 else { continue }
            connections[String(fields[3])] = fields[4] == "r"
        }
        return connections
    }

    /// FCM's success body for sends, a static OAuth answer for /token; every answered request logged.
    public static func configuration(port: UInt16, directory: String, keepaliveRequests: Int = 1_000_000,
                                     tlsProtocols: String = "TLSv1.2", sessionTickets: Bool = true, upstreamPort: UInt16? = nil) -> String {
        let held = upstreamPort.map { upstream in
            """
            location /held/ {
                        proxy_pass http://127.0.0.1:\(upstream);
                        proxy_set_header X-Connection $connection;
                    }
            """
        } ?? ""
        return """
        worker_processes 1;
        pid \(directory)/nginx.pid;
        error_log \(directory)/logs/error.log warn;
        events { worker_connections 4096; }
        http {
            log_format line '$request_method $request_uri $status $connection $ssl_session_reused';
            access_log \(directory)/logs/access.log line;
            client_body_temp_path \(directory)/body;
            proxy_temp_path \(directory)/proxy;
            fastcgi_temp_path \(directory)/fastcgi;
            uwsgi_temp_path \(directory)/uwsgi;
            scgi_temp_path \(directory)/scgi;
            keepalive_requests \(keepaliveRequests);
            http2_max_concurrent_streams 128;
            server {
                listen 127.0.0.1:\(port) ssl http2;
                ssl_certificate \(directory)/server.pem;
                ssl_certificate_key \(directory)/server.key;
                ssl_protocols \(tlsProtocols);
                ssl_session_tickets \(sessionTickets ? "on" : "off");
                location = /token {
                    default_type application/json;
                    return 200 '{"access_token":"nginx-static-token","expires_in":3600,"token_type":"Bearer"}';
                }
                # `return` answers as soon as the headers arrive, and a stream whose body is still being sent is then
                # reset: libcurl 7.88 fails such a send ("Stream error in the HTTP/2 framing layer"). Behind a proxy_pass
                # nginx reads the whole body first (proxy_request_buffering), as FCM does; for tests of large bodies.
                location /read-body/ {
                    proxy_pass http://unix:\(directory)/answer.sock:/;
                }
                \(held)
                location / {
                    default_type application/json;
                    return 200 '{"name":"projects/bench-project/messages/0:1700000000000000%31337"}';
                }
            }
            server {
                listen unix:\(directory)/answer.sock;
                access_log off;
                location / {
                    default_type application/json;
                    return 200 '{"name":"projects/bench-project/messages/0:1700000000000000%31337"}';
                }
            }
        }
        """
    }

    static func canConnect(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        return withIPv4Address(port: port) { connect(fd, $0, $1) } == 0
    }
}
