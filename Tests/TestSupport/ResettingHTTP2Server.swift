import Foundation

/// An HTTP/2 server (raw frames over TLS, Debian's python3) that processes each request whole, then goes away with an
/// answer the client cannot read: a GOAWAY whose last stream is that request's (so it was processed), and response
/// headers that are malformed, which the client's nghttp2 resets. libcurl 7.88 fails such a stream with a bare HTTP/2
/// error, as it fails the last stream a GOAWAY refuses; `processed` counts the requests whose body arrived whole.
public final class ResettingHTTP2Server: Sendable {
    public let port: UInt16
    public let directory: String
    private let process = Process()

    public init(fixtures: TLSFixtures = .shared) async throws {
        port = FreePort.next()
        directory = NSTemporaryDirectory() + "mw-h2reset-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Self.script.write(toFile: "\(directory)/server.py", atomically: true, encoding: .utf8)
        try await Nginx.launch(process, binary: "/usr/bin/python3",
                         arguments: ["\(directory)/server.py", String(port), "\(fixtures.directory)/server.pem",
                                     "\(fixtures.directory)/server.key", "\(directory)/processed.log"],
                         port: port, failure: "the resetting HTTP/2 server did not start")
    }

    deinit { stop() }

    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }

    public var url: String { "https://127.0.0.1:\(port)" }

    /// Requests whose body the server received whole.
    public var processed: Int {
        ((try? String(contentsOfFile: "\(directory)/processed.log", encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    static let script = #"""
        import socket, ssl, struct, sys, threading, time

        port, certificate, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
        DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY = 0, 1, 3, 4, 7
        END_STREAM, END_HEADERS, ACK = 1, 4, 1

        def frame(kind, flags, stream, payload=b""):
            return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

        def read(conn, n):
            data = b""
            while len(data) < n:
                chunk = conn.recv(n - len(data))
                if not chunk: raise EOFError
                data += chunk
            return data

        def serve(conn):
            try:
                read(conn, 24)  # the client's preface
                conn.sendall(frame(SETTINGS, 0, 0))
                while True:
                    header = read(conn, 9)
                    length, kind, flags = int.from_bytes(header[:3], "big"), header[3], header[4]
                    stream = int.from_bytes(header[5:], "big") & 0x7FFFFFFF
                    read(conn, length)
                    if kind == SETTINGS and not flags & ACK:
                        conn.sendall(frame(SETTINGS, ACK, 0))
                    elif kind in (DATA, HEADERS) and flags & END_STREAM:
                        with open(log, "a") as f: f.write("%d\n" % stream)
                        # Processed; the server goes away, and its answer is malformed (an upper-case header name,
                        # no :status): the client's nghttp2 resets the stream itself.
                        conn.sendall(frame(GOAWAY, 0, 0, struct.pack(">II", stream, 0))
                                     + frame(HEADERS, END_STREAM | END_HEADERS, stream, b"\x00\x03BAD\x01x"))
                        time.sleep(0.2)
                        return
            except (EOFError, OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        context.set_alpn_protocols(["h2"])
        listener = socket.create_server(("127.0.0.1", port))
        while True:
            client, _ = listener.accept()
            try:
                conn = context.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                client.close()
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
        """#
}
