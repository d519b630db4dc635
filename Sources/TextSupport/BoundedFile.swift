import Glibc

/// A file read whole into memory, never more than a cap: a setting that names a huge file, `/dev/zero` or a pipe that
/// never ends is refused instead of growing the process. The credential and certificate files the daemon reads are a
/// few KiB; the caller picks a cap far above that.
public enum BoundedFile {
    /// Why a file was not read.
    public enum Failure: Error, Equatable, Sendable {
        /// `open` or `read` failed with this errno.
        case unreadable(Int32)
        /// It holds more than `limit` bytes (only `limit + 1` of them were read).
        case tooLarge(limit: Int)
    }

    /// The whole file when it holds at most `limit` bytes. Reads at most `limit + 1` bytes, whatever `stat` says: a
    /// device or a pipe reports no size.
    public static func read(_ path: String, limit: Int) -> Result<[UInt8], Failure> {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return .failure(.unreadable(errno)) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while bytes.count <= limit {
            let wanted = min(chunk.count, limit + 1 - bytes.count)
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, wanted) }
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(.unreadable(errno))
            }
            if count == 0 { return .success(bytes) }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return .failure(.tooLarge(limit: limit))
    }

    /// A size as an operator reads a cap: "64 KiB", "1 MiB", "512 bytes".
    public static func describe(_ bytes: Int) -> String {
        if bytes >= 1024 * 1024, bytes % (1024 * 1024) == 0 { return "\(bytes / (1024 * 1024)) MiB" }
        if bytes >= 1024, bytes % 1024 == 0 { return "\(bytes / 1024) KiB" }
        return "\(bytes) bytes"
    }
}

extension BoundedFile.Failure {
    /// What went wrong with `path`, for a message that names the setting first: "/x is larger than 64 KiB (...)".
    /// `typical` says what such a file usually weighs.
    public func problem(_ path: String, typical: String) -> String {
        switch self {
        case .unreadable(let code):
            return "\(path): cannot read the file (\(String(cString: strerror(code))))"
        case .tooLarge(let limit):
            return "\(path) is larger than \(BoundedFile.describe(limit)) (\(typical)): not read"
        }
    }
}
