import Foundation

/// Debian's tinyproxy as an operator's egress proxy (`HTTPS_PROXY=http://…`: HTTP CONNECT, TLS end to end through
/// the tunnel), on a loopback port.
public final class Tinyproxy: Sendable {
    public let port: UInt16
    public let directory: String
    private let process = Process()

    public static var binary: String? {
        ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// `basicAuth`: the user and password the proxy requires (tinyproxy refuses a tunnel without them with 401).
    public init(basicAuth: (user: String, password: String)? = nil) async throws {
        guard let binary = Self.binary else { throw TestSupportError("tinyproxy is not installed") }
        port = FreePort.next()
        directory = NSTemporaryDirectory() + "mw-tinyproxy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // No ConnectPort line: CONNECT to any port (the stand-ins listen on random ones).
        try """
            Port \(port)
            Listen 127.0.0.1
            Timeout 60
            MaxClients 50
            Allow 127.0.0.1
            LogFile "\(directory)/tinyproxy.log"
            LogLevel Connect
            PidFile "\(directory)/tinyproxy.pid"
            \(basicAuth.map { "BasicAuth \($0.user) \($0.password)" } ?? "")
            """.write(toFile: "\(directory)/tinyproxy.conf", atomically: true, encoding: .utf8)
        try await Nginx.launch(process, binary: binary, arguments: ["-d", "-c", "\(directory)/tinyproxy.conf"], port: port,
                         failure: "tinyproxy did not start; see \(directory)/tinyproxy.log")
    }

    deinit { stop() }

    /// SIGKILL: tinyproxy keeps the signal mask it starts with, and a test thread's blocks SIGTERM.
    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }

    public var url: String { "http://127.0.0.1:\(port)" }

    /// The `host:port` of every CONNECT the proxy was asked for, in order.
    public var tunnels: [String] {
        let log = (try? String(contentsOfFile: "\(directory)/tinyproxy.log", encoding: .utf8)) ?? ""
        return log.split(separator: "\n").compactMap { line in
            guard let range = line.range(of: "): CONNECT ") else { return nil }
            return line[range.upperBound...].split(separator: " ").first.map(String.init)
        }
    }
}
