import Foundation
import Glibc
import Testing
import TestSupport

/// Issue 54: every command marks its process non-dumpable (PR_SET_DUMPABLE 0, RLIMIT_CORE 0) before it reads a secret,
/// not only `run`: check-config reads both keys, the database commands DATABASE_URL. Seen from outside, on the built
/// binary, at the moment it reads one: stopped in the read of a service-account file that is a FIFO, or in the connect
/// to a database that accepts and never answers. The kernel makes a non-dumpable process's /proc/PID root's; a
/// dumpable one's belongs to its user, so the binary runs as `nobody` (setpriv) when the tests run as root.
@Suite("Core dumps off for every command", .blockingFixtures)
struct CoreDumpTests {
    /// A world-readable directory with a copy of the binary and a FIFO any user may open (the build directory and the
    /// test's temp files may be closed to `nobody`).
    struct Sandbox {
        let directory: String
        let binary: String
        let fifo: String

        init() throws {
            var template = Array((NSTemporaryDirectory() + "mw-coredump-XXXXXX").utf8CString)
            guard let made = mkdtemp(&template) else { throw TestSupportError("mkdtemp: \(errno)") }
            directory = String(cString: made)
            chmod(directory, 0o755)
            binary = directory + "/medication-worker"
            try FileManager.default.copyItem(atPath: TestBinaries.path("medication-worker"), toPath: binary)
            chmod(binary, 0o755)
            fifo = directory + "/fcm-service-account.json"
            guard mkfifo(fifo, 0o666) == 0, chmod(fifo, 0o666) == 0 else { throw TestSupportError("mkfifo: \(errno)") }
        }

        func remove() { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// The identity the binary runs as, and the arguments that make it so.
    static var runAs: (uid: uid_t, prefix: [String]) {
        getuid() == 0 ? (65534, ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]) : (getuid(), [])
    }

    /// Starts `command` of the copied binary; returns once it blocks reading the FIFO or connecting to `database`
    /// (true), or when it exited or 30 s passed (false). `body` looks at the process while it is blocked.
    static func whileReadingASecret(_ command: [String], _ body: (pid_t) throws -> Void) throws -> Bool {
        let sandbox = try Sandbox()
        defer { sandbox.remove() }
        let database = LoopbackSocket()
        defer { database.close() }
        let process = Process()
        let prefix = runAs.prefix
        process.executableURL = URL(fileURLWithPath: prefix.first ?? sandbox.binary)
        process.arguments = Array(prefix.dropFirst()) + (prefix.isEmpty ? [] : [sandbox.binary]) + command
        process.environment = [
            "DATABASE_URL": "host=127.0.0.1 port=\(database.port) dbname=x user=x sslmode=disable connect_timeout=60",
            "FCM_SERVICE_ACCOUNT_FILE": sandbox.fifo,
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let exit = try process.start()
        var writer: Int32 = -1
        defer {
            // Only a process still running: once reaped, its pid may already be another test's child.
            if !exit.hasExited { kill(process.processIdentifier, SIGKILL) }
            _ = exit.waitBlocking()
            if writer >= 0 { close(writer) }
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline, !exit.hasExited {
            // A writer opens only once a reader has: the binary is in the service account's open (then its read: nothing
            // is written).
            writer = open(sandbox.fifo, O_WRONLY | O_NONBLOCK)
            var pending = pollfd(fd: database.fd, events: Int16(POLLIN), revents: 0)
            if writer >= 0 || poll(&pending, 1, 50) > 0 {
                try body(process.processIdentifier)
                return true
            }
        }
        return false
    }

    static let commands: [[String]] = [
        ["run"], ["check-config"], ["check-config", "--online"], ["migrate"], ["status"], ["event", "1"],
        ["events", "--status", "DEAD"], ["redrive", "--all", "--dry-run"], ["resend", "--event", "1", "--dry-run"],
        ["devices", "disabled"], ["devices", "enable", "--since", "1h", "--dry-run"],
    ]

    @Test(arguments: commands)
    func everyCommand_isNotDumpable_andHasNoCoreLimit_whileItReadsASecret(command: [String]) throws {
        let reached = try Self.whileReadingASecret(command) { pid in
            var status = stat()
            #expect(stat("/proc/\(pid)/status", &status) == 0)
            #expect(status.st_uid == 0, "\(command): /proc/\(pid) belongs to uid \(status.st_uid): the process is dumpable")
            let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
            let core = limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }?.split(separator: " ")
            #expect(core?.dropFirst(4).prefix(2) == ["0", "0"], "\(command): \(core ?? [])")
        }
        #expect(reached, "\(command) exited (or took 30 s) before it read the service account or connected to the database")
    }

    /// The check above can fail here: a dumpable process under the same identity (`sleep`) shows /proc/PID as its user's.
    @Test func aDumpableProcessUnderTheSameIdentity_ownsItsProcDirectory() throws {
        let process = Process()
        let prefix = Self.runAs.prefix
        process.executableURL = URL(fileURLWithPath: prefix.first ?? "/bin/sleep")
        process.arguments = Array(prefix.dropFirst()) + (prefix.isEmpty ? [] : ["/bin/sleep"]) + ["30"]
        let exit = try process.start()
        defer {
            if !exit.hasExited { kill(process.processIdentifier, SIGKILL) }
            _ = exit.waitBlocking()
        }
        let pid = process.processIdentifier
        var status = stat()
        var owner: uid_t?
        var tries = 0
        // setpriv changes its user, then execs sleep: the owner is root for a moment.
        while owner != Self.runAs.uid, tries < 100 {
            if stat("/proc/\(pid)/status", &status) == 0 { owner = status.st_uid }
            tries += 1
            usleep(20_000)
        }
        #expect(owner == Self.runAs.uid)
    }
}
