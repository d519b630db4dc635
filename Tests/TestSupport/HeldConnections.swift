import Foundation
import Testing

/// Many connections that each send the start of a request and never the rest, held by a python3 child rather than by
/// the test process. The test process must stay below FD_SETSIZE (1,024): Debian 13's libcurl 8.14 hands a socket to
/// a fortified `FD_SET` on some path, and glibc aborts the whole test run ("bit out of range 0 - FD_SETSIZE on
/// fd_set") when that socket's descriptor is 1,024 or more, as it was while 2,000 of these sat in the test process.
public final class HeldConnections: Sendable {
    private let process: Process
    private let exit: ProcessExit
    private let output: String

    static let script = #"""
        import resource, socket, sys, time
        port, count, source, head = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4].encode()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 64)), hard))
        held = []
        for _ in range(count):
            try:
                s = socket.socket()
            except OSError:
                break
            s.setblocking(False)
            s.bind((source, 0))
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        time.sleep(0.3)
        for s in held:
            try:
                s.send(head)
            except OSError:
                pass
        print(len(held), flush=True)
        time.sleep(3600)
        """#

    /// Opens `count` non-blocking connections from `source` to 127.0.0.1:`port` and, 300 ms later, sends `head` on each.
    public init(port: UInt16, count: Int, from source: String, sending head: String) throws {
        output = try TestBinaries.temporaryFile("", suffix: ".held")
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", Self.script, String(port), String(count), source, head]
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle.nullDevice
        exit = try process.start()
    }

    /// How many connections the child opened, once it opened them and sent every head (nil after 20 s).
    public func opened() async throws -> Int? {
        var count: Int?
        _ = try await eventually("the held connections are open", timeout: .seconds(20), every: .milliseconds(100)) {
            count = (try? String(contentsOfFile: output, encoding: .utf8)).flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            return count != nil || exit.hasExited
        }
        return count
    }

    /// Closes every connection (ends the child) and waits for it: only on `BlockingExecutor` (`.blockingFixtures`).
    public func stop() {
        // SIGKILL: the child inherits this process's SIGTERM ignored (signal handling through DispatchSource).
        if !exit.hasExited { kill(process.processIdentifier, SIGKILL) }
        _ = exit.waitBlocking()
        try? FileManager.default.removeItem(atPath: output)
    }
}
