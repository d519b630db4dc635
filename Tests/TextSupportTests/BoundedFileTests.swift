import Foundation
import Glibc
import Testing
import TextSupport

/// `BoundedFile`: a file read whole, never past its cap (issue 54).
@Suite("BoundedFile: files read whole, up to a cap")
struct BoundedFileTests {
    static func file(_ size: Int) throws -> String {
        let path = NSTemporaryDirectory() + "mw-bounded-\(UUID().uuidString)"
        try Data(repeating: UInt8(ascii: "x"), count: size).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func fileUpToTheCap_isReadWhole_oneByteMoreIsRefused() throws {
        let exact = try Self.file(40_000)
        let over = try Self.file(40_001)
        defer { unlink(exact); unlink(over) }
        #expect(BoundedFile.read(exact, limit: 40_000) == .success([UInt8](repeating: UInt8(ascii: "x"), count: 40_000)))
        #expect(BoundedFile.read(over, limit: 40_000) == .failure(.tooLarge(limit: 40_000)))
        #expect(BoundedFile.read(exact, limit: 0) == .failure(.tooLarge(limit: 0)))
        let empty = try Self.file(0)
        defer { unlink(empty) }
        #expect(BoundedFile.read(empty, limit: 0) == .success([]))
    }

    /// A device that never ends (stat says size 0) is refused at the cap, not read until memory runs out.
    @Test func endlessDevice_isRefusedAtTheCap() {
        #expect(BoundedFile.read("/dev/zero", limit: 64 * 1024) == .failure(.tooLarge(limit: 64 * 1024)))
    }

    @Test func missingFileOrDirectory_isUnreadableWithItsErrno() {
        #expect(BoundedFile.read("/nonexistent/file", limit: 10) == .failure(.unreadable(ENOENT)))
        #expect(BoundedFile.read("/", limit: 10) == .failure(.unreadable(EISDIR)))
    }

    @Test func problem_namesThePathTheCapAndWhatSuchAFileWeighs() {
        #expect(BoundedFile.Failure.tooLarge(limit: 64 * 1024).problem("/etc/sa.json", typical: "about 2.3 KB")
                == "/etc/sa.json is larger than 64 KiB (about 2.3 KB): not read")
        #expect(BoundedFile.Failure.unreadable(ENOENT).problem("/etc/sa.json", typical: "")
                == "/etc/sa.json: cannot read the file (No such file or directory)")
        #expect(BoundedFile.describe(1024 * 1024) == "1 MiB")
        #expect(BoundedFile.describe(1000) == "1000 bytes")
    }
}
