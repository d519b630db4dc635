import CCurl
import Foundation
import Testing

/// Which libcurl (and its TLS library and nghttp2) this test process loaded, from `curl_version_info`: the
/// line `libraries: libcurl …` in the output says which Debian release's libraries the suites ran against
/// (scripts/test-trixie runs them inside a Debian 13 container). MW_EXPECT_LIBCURL=8.14 makes it a check.
@Suite("The libraries loaded at run time")
struct LibraryVersionsTests {
    @Test("curl_version_info: libcurl, its TLS library and nghttp2, with HTTP/2")
    func libcurl() throws {
        // CURLVERSION_NOW is a macro naming an enum case, which Swift does not import; the tenth layout has every field
        // read here and is accepted by every libcurl since 7.77.
        let info = try #require(curl_version_info(CURLVERSION_TENTH))
        let version = String(cString: info.pointee.version)
        let tls = info.pointee.ssl_version.map { String(cString: $0) } ?? "no TLS"
        let nghttp2 = info.pointee.nghttp2_version.map { String(cString: $0) } ?? "none"
        print("libraries: libcurl \(version) (\(tls), nghttp2/\(nghttp2))")
        #expect(info.pointee.features & (1 << 16) != 0,   // CURL_VERSION_HTTP2
                "libcurl \(version) without HTTP/2")
        if let expected = ProcessInfo.processInfo.environment["MW_EXPECT_LIBCURL"], !expected.isEmpty {
            #expect(version.hasPrefix(expected), "libcurl \(version), expected \(expected)")
        }
    }
}
