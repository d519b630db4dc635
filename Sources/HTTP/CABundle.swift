import CCurl
import FoundationEssentials
import Glibc
import TextSupport

/// The system's CA bundle plus an operator's extra CA, as one file libcurl can open by name (`CURLOPT_CAINFO`
/// replaces the system store, so both must be in it; and libcurl caches a file's parsed store, not an in-memory
/// blob's). The file lives in memory (`memfd_create`), named through `/proc/self/fd`: nothing is written to disk,
/// and nothing is left behind when the process ends, however it ends.
final class CABundle: Sendable {
    /// The path libcurl opens: `/proc/self/fd/N`.
    let path: String
    private let descriptor: Int32

    init(extraCAFile caFile: String) throws(HTTPError) {
        let extra: [UInt8]
        switch BoundedFile.read(caFile, limit: HTTPClientConfiguration.maxCAFileBytes) {
        case .success(let bytes): extra = bytes
        case .failure(let failure):
            throw HTTPError(.invalidRequest, "CA file \(failure.problem(caFile, typical: HTTPClientConfiguration.typicalCAFileSize))")
        }
        let system = FileManager.default.contents(atPath: "/etc/ssl/certs/ca-certificates.crt") ?? Data()
        let bundle = [UInt8](system) + Array("\n".utf8) + extra
        let descriptor = memfd_create("medication-worker-ca", 1 /* MFD_CLOEXEC */)
        guard descriptor >= 0 else {
            throw HTTPError(.invalidRequest, "cannot create the in-memory CA bundle: \(String(cString: strerror(errno)))")
        }
        var written = 0
        while written < bundle.count {
            let count = bundle[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else {
                let reason = String(cString: strerror(errno))
                close(descriptor)
                throw HTTPError(.invalidRequest, "cannot write the in-memory CA bundle: \(reason)")
            }
            written += count
        }
        self.descriptor = descriptor
        path = "/proc/self/fd/\(descriptor)"
    }

    deinit { close(descriptor) }
}
