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

    /// Runs `name` with arguments and exactly `environment` (nothing inherited), waits for it to exit.
    public static func run(_ name: String, _ arguments: [String], environment: [String: String]) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path(name))
        process.arguments = arguments
        process.environment = environment
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self))
    }

    /// A temp file with `contents`, removed by the caller.
    public static func temporaryFile(_ contents: String, suffix: String = "") throws -> String {
        let path = NSTemporaryDirectory() + "mw-\(UUID().uuidString)\(suffix)"
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
