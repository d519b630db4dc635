@testable import HTTP
import Testing

/// The environment's proxy, read once, in libcurl's order.
@Suite("Proxy settings")
struct ProxySettingsTests {
    @Test func noProxyVariables_meanNoProxy() {
        let settings = ProxySettings(environment: [:])
        #expect(settings.proxy(for: "https://fcm.googleapis.com/v1/projects/p/messages:send") == "")
        #expect(settings.noProxy == "")
    }

    @Test func schemeVariable_thenAllProxy() {
        let settings = ProxySettings(environment: ["https_proxy": "http://squid:3128", "all_proxy": "socks5://gw:1080", "no_proxy": "localhost,127.0.0.1"])
        #expect(settings.proxy(for: "https://oauth2.googleapis.com/token") == "http://squid:3128")
        #expect(settings.proxy(for: "http://127.0.0.1:8080/x") == "socks5://gw:1080")
        #expect(settings.noProxy == "localhost,127.0.0.1")
    }

    @Test func upperCase_isReadExceptHTTPProxy() {
        // HTTP_PROXY in upper case is never read (a CGI program's environment carries a client's Proxy: header in it).
        let settings = ProxySettings(environment: ["HTTPS_PROXY": "http://a:1", "HTTP_PROXY": "http://b:2", "NO_PROXY": "*"])
        #expect(settings.proxy(for: "https://x/") == "http://a:1")
        #expect(settings.proxy(for: "http://x/") == "")
        #expect(settings.noProxy == "*")
        #expect(ProxySettings(environment: ["https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"]).proxy(for: "HTTPS://x/") == "http://lower:1")
    }

    /// A failure's message says when the address libcurl could not reach was the proxy's (and where it was set).
    @Test func proxyAddress_isRecognisedInLibcurlsMessage() {
        let settings = ProxySettings(environment: ["HTTPS_PROXY": "http://user:pw@squid.corp:3128", "ALL_PROXY": "socks5://[::1]:1080"])
        let proxy = settings.source(for: "https://fcm.googleapis.com/v1/x")
        #expect(proxy?.variable == "HTTPS_PROXY")
        #expect(proxy?.isNamed(in: "Failed to connect to squid.corp port 3128 after 3 ms: Couldn't connect to server") == true)
        #expect(proxy?.isNamed(in: "Failed to connect to fcm.googleapis.com port 443 after 3 ms: Couldn't connect to server") == false)
        #expect(proxy?.isNamed(in: "Failed to connect to squid.corp port 31280 after 3 ms") == false)
        let socks = settings.source(for: "http://127.0.0.1/x")
        #expect(socks?.variable == "ALL_PROXY" && socks?.isNamed(in: "Failed to connect to ::1 port 1080 after 0 ms") == true)
        let bare = ProxySettings(environment: ["https_proxy": "squid"]).source(for: "https://x/")
        #expect(bare?.isNamed(in: "Failed to connect to squid port 1080 after 0 ms") == true)
    }
}
