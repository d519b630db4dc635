import Foundation

/// Debian's stunnel as the TLS front of an egress proxy (`HTTPS_PROXY=https://…`): it accepts TLS on a loopback port
/// with the fixtures' server certificate (127.0.0.1, from the test CA) and passes the plain bytes to `target`.
public final class Stunnel: Sendable {
    public let port: UInt16
    public let directory: String
    private let process = Process()

    public static var binary: String? {
        ["/usr/bin/stunnel4", "/usr/bin/stunnel"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    public init(forwardingTo target: UInt16, fixtures: TLSFixtures = .shared) async throws {
        guard let binary = Self.binary else { throw TestSupportError("stunnel4 is not installed") }
        port = FreePort.next()
        directory = NSTemporaryDirectory() + "mw-stunnel-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // debug = 5 (notice) logs one "accepted connection" line per client connection. To stderr (foreground = yes),
        // which stunnel writes unbuffered, not to an `output =` file: from stunnel 5.69 on (Debian 13 has 5.74) that
        // file is buffered and flushed once a second by a thread of its own ("Improved logging performance with the
        // output option", NEWS 5.69), so a count read right after a connection saw none of it.
        try """
            foreground = yes
            pid =
            debug = 5
            [proxy]
            accept = 127.0.0.1:\(port)
            connect = 127.0.0.1:\(target)
            cert = \(fixtures.directory)/server.pem
            key = \(fixtures.directory)/server.key
            """.write(toFile: "\(directory)/stunnel.conf", atomically: true, encoding: .utf8)
        try await Nginx.launch(process, binary: binary, arguments: ["\(directory)/stunnel.conf"], port: port,
                               failure: "stunnel did not start; see \(directory)/stunnel.log", stderrPath: "\(directory)/stunnel.log")
    }

    deinit { stop() }

    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }

    public var url: String { "https://127.0.0.1:\(port)" }

    /// Client connections accepted over TLS so far.
    public var connectionsAccepted: Int {
        let log = (try? String(contentsOfFile: "\(directory)/stunnel.log", encoding: .utf8)) ?? ""
        return log.split(separator: "\n").filter { $0.contains("accepted connection from") }.count
    }
}
