import Foundation

/// A PostgreSQL cluster of its own on a loopback TCP port, for tests about the server's lifecycle (started after the
/// daemon). Started and stopped by the scripts' own starter, `scripts/lib/pg.sh`, with the server scripts/test found
/// (`TEST_PG_BINDIR`).
public final class TemporaryCluster: Sendable {
    public let port: UInt16
    public let directory: String

    /// Picks a port and a directory; `start` makes the cluster.
    public init() throws {
        guard ProcessInfo.processInfo.environment["TEST_PG_BINDIR"]?.isEmpty == false else {
            throw TestSupportError("TEST_PG_BINDIR is not set: run the suite through scripts/test")
        }
        port = FreePort.next()
        directory = "/tmp/mw-cluster-\(UUID().uuidString.prefix(8))"
    }

    /// `host=127.0.0.1 port=… user=postgres dbname=postgres`.
    public var conninfo: String { "host=127.0.0.1 port=\(port) user=postgres dbname=postgres" }

    /// Makes the cluster the first time, then starts it.
    public func start() throws {
        try pg("start", ["listen_addresses=127.0.0.1", "port=\(port)", "fsync=off"])
    }

    /// SIGSTOP to the postmaster and every server process: a database that accepts TCP (the kernel still
    /// completes handshakes and acknowledges data) and never answers. The postmaster is stopped first and seen stopped
    /// (from then on it forks nothing), then its children until every one is seen stopped: a backend forked while the
    /// children were being listed (a daemon's pool opening a connection) would otherwise go on answering, and a
    /// daemon holding that connection would find the database fine. False when something still ran after 5 s.
    @discardableResult
    public func freeze() -> Bool {
        guard let postmaster = postmasterPID else { return false }
        let deadline = ContinuousClock.now + .seconds(5)
        repeat {
            let running = Self.family(of: postmaster).filter { !"TtZX".contains($0.state) }
            if running.isEmpty { return true }
            // The postmaster first: children listed before it has stopped may not be all of them.
            if let parent = running.first(where: { $0.pid == postmaster }) {
                kill(parent.pid, SIGSTOP)
            } else {
                for process in running { kill(process.pid, SIGSTOP) }
            }
            usleep(2_000)
        } while ContinuousClock.now < deadline
        return false
    }

    /// SIGCONT: the frozen server carries on.
    public func thaw() {
        guard let postmaster = postmasterPID else { return }
        for process in Self.family(of: postmaster) { kill(process.pid, SIGCONT) }
    }

    /// The postmaster and its children, one a line: pid, state (`T`: stopped) and process title (for a failure's message).
    public func processStates() -> String {
        guard let postmaster = postmasterPID else { return "no postmaster.pid in \(directory)/data" }
        return Self.family(of: postmaster).map { process in
            let title = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(process.pid)/cmdline")))
                .map { String(decoding: $0, as: UTF8.self).replacingOccurrences(of: "\0", with: " ") } ?? ""
            return "\(process.pid) \(process.state) \(title.trimmingCharacters(in: .whitespaces))"
        }.joined(separator: "\n")
    }

    private var postmasterPID: Int32? {
        (try? String(contentsOfFile: "\(directory)/data/postmaster.pid", encoding: .utf8))?
            .split(separator: "\n").first.flatMap { Int32($0) }
    }

    /// The postmaster (first) and its children, each with its state letter from /proc/PID/stat.
    private static func family(of postmaster: Int32) -> [(pid: Int32, state: Character)] {
        var family: [(pid: Int32, state: Character)] = []
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 1, let state = fields[0].first, pid == postmaster || Int32(fields[1]) == postmaster else { continue }
            if pid == postmaster { family.insert((pid, state), at: 0) } else { family.append((pid, state)) }
        }
        return family
    }

    public func stop() {
        thaw()
        try? pg("stop", [])
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static let starter = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/lib/pg.sh").path

    /// `scripts/lib/pg.sh COMMAND DIR SETTINGS...`, with PG_BINDIR as scripts/test found it.
    private func pg(_ command: String, _ settings: [String]) throws {
        try Self.run("/usr/bin/env", ["PG_BINDIR=\(ProcessInfo.processInfo.environment["TEST_PG_BINDIR"] ?? "")", "bash",
                                      Self.starter, command, directory] + settings)
    }

    /// posix_spawn + waitpid: `Process.waitUntilExit` can miss the exit of a child whose own child
    /// (the postmaster) lives on. Every descriptor above stderr is closed in the child: the postmaster would otherwise
    /// keep the write end of another test's pipe open, and that test would wait for its end-of-file for good.
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc module does not declare.
    private static let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    private static func run(_ path: String, _ arguments: [String]) throws {
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        if let closeFrom = addCloseFrom { _ = closeFrom(&actions, 3) }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard spawned == 0 else { throw TestSupportError("cannot start \(path): errno \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        guard status == 0 else {
            throw TestSupportError("\(path) \(arguments.joined(separator: " ")) failed (wait status \(status))")
        }
    }
}
