import Foundation

/// Runs the package's built executables (they sit next to the test bundle in `.build/<config>/`).
public enum TestBinaries {
    /// The directory holding the built products.
    public static var productsDirectory: URL {
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        while url.path != "/" {
            if url.pathExtension == "xctest" { return url.deletingLastPathComponent() }
            url.deleteLastPathComponent()
        }
        return URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    }

    /// Full path of a built executable.
    public static func path(_ name: String) -> String {
        productsDirectory.appendingPathComponent(name).path
    }

    /// The result of running a binary to completion.
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs `name` with arguments and exactly `environment` (nothing inherited), awaits its exit. Its output goes to
    /// temp files, read after the exit: nothing blocks on a pipe.
    public static func run(_ name: String, _ arguments: [String], environment: [String: String]) async throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path(name))
        process.arguments = arguments
        process.environment = environment
        let outPath = try temporaryFile("", suffix: ".out")
        let errPath = try temporaryFile("", suffix: ".err")
        defer { try? FileManager.default.removeItem(atPath: outPath); try? FileManager.default.removeItem(atPath: errPath) }
        process.standardOutput = FileHandle(forWritingAtPath: outPath)
        process.standardError = FileHandle(forWritingAtPath: errPath)
        let status = try await process.runToExit()
        return Result(status: status, stdout: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
                      stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "")
    }

    /// A temp file with `contents`, removed by the caller.
    public static func temporaryFile(_ contents: String, suffix: String = "") throws -> String {
        let path = NSTemporaryDirectory() + "mw-\(UUID().uuidString)\(suffix)"
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
