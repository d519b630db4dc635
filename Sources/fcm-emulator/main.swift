import FCMEmulator
import Foundation
import HTTPServer

// fcm-emulator: a loopback FCM HTTP v1 + Google OAuth stand-in for the demo, fault suite and benchmark.
//   fcm-emulator --public-key sa.pub [--cert server.pem --key server.key] [--host 127.0.0.1] [--port 0]
//                [--latency-ms 0] [--no-record] [--unavailable-seconds N [--unavailable-retry-after S]]
//                [--refuse-tokens-seconds N]   (the token endpoint answers invalid_grant for the first N seconds)
//                [--token-bytes N]             (issued access tokens are N bytes long, as Google's ~1 KB ones)
//                [--token-lifetime S]          (issued access tokens expire after S seconds; Google's live 3600)
//                [--sender-id-mismatch]        (every send answers 403 SENDER_ID_MISMATCH: a key of another project)
//                [--not-found-after S]         (after S seconds of normal answers, every send answers Google's plain 404
//                                              NOT_FOUND with no FcmError detail: a deleted project, a rewritten path)
//                [--quota-per-second N [--quota-burst B]]  (the project's quota: sends over N/s, B more at once (default
//                                              100), get 429 QUOTA_EXCEEDED without Retry-After, as nginx's limit_req)
// Prints "fcm-emulator listening on URL" and serves until SIGTERM/SIGINT.

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("fcm-emulator: \(message)\n".utf8))
    exit(64)
}

var options: [String: String] = [:]
var flags: Set<String> = []
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    guard argument.hasPrefix("--") else { fail("unexpected argument \(argument)") }
    if argument == "--no-record" || argument == "--sender-id-mismatch" { flags.insert(argument); continue }
    guard let value = arguments.next() else { fail("\(argument) needs a value") }
    options[argument] = value
}
func read(_ option: String, from options: [String: String]) -> String? {
    guard let path = options[option] else { return nil }
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { fail("cannot read \(option) \(path)") }
    return text
}
guard let publicKey = read("--public-key", from: options) else { fail("--public-key FILE is required (the service account's public key)") }
var tls: TLSIdentity?
if let cert = read("--cert", from: options), let key = read("--key", from: options) { tls = TLSIdentity(certificatePEM: cert, privateKeyPEM: key) }
var configuration = FCMEmulator.Configuration(assertionPublicKeyPEM: publicKey, tls: tls)
configuration.host = options["--host"] ?? "127.0.0.1"
configuration.port = UInt16(options["--port"] ?? "0") ?? 0
configuration.latency = .milliseconds(Int(options["--latency-ms"] ?? "0") ?? 0)
configuration.recordMessages = !flags.contains("--no-record")
if let bytes = options["--token-bytes"] {
    guard let length = Int(bytes), (1...8192).contains(length) else { fail("--token-bytes must be 1...8192, got \(bytes)") }
    configuration.tokenBytes = length
}
if let seconds = options["--token-lifetime"] {
    guard let lifetime = Int(seconds), (1...3600).contains(lifetime) else { fail("--token-lifetime must be 1...3600 seconds, got \(seconds)") }
    configuration.tokenLifetime = lifetime
}
configuration.unavailableFor = .seconds(Int(options["--unavailable-seconds"] ?? "0") ?? 0)
if let retryAfter = options["--unavailable-retry-after"].flatMap(Int.init) { configuration.unavailableRetryAfter = .seconds(retryAfter) }
if let rate = options["--quota-per-second"] {
    guard let perSecond = Double(rate), perSecond > 0 else { fail("--quota-per-second must be a positive number, got \(rate)") }
    guard let burst = Int(options["--quota-burst"] ?? "100"), burst >= 0 else { fail("--quota-burst must be a whole number") }
    configuration.projectQuota = (perSecond, burst)
}
if let seconds = options["--not-found-after"] {
    guard let after = Double(seconds), after >= 0 else { fail("--not-found-after must be a number of seconds >= 0, got \(seconds)") }
    configuration.notFoundAfter = .milliseconds(Int64(after * 1000))
}
let emulator: FCMEmulator
do { emulator = try FCMEmulator(configuration: configuration) } catch { fail("\(error)") }
if let seconds = options["--refuse-tokens-seconds"].flatMap(Int.init), seconds > 0 { emulator.refuseTokens(for: .seconds(seconds)) }
if flags.contains("--sender-id-mismatch") { emulator.setProjectFault(.senderIdMismatch) }
print("fcm-emulator listening on \(emulator.baseURL) (token endpoint \(emulator.tokenURI))")
fflush(nil)
signal(SIGTERM, SIG_IGN)
signal(SIGINT, SIG_IGN)
let stop = DispatchSemaphore(value: 0)
let sources = [SIGTERM, SIGINT].map { number -> DispatchSourceSignal in
    let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
    source.setEventHandler { stop.signal() }
    source.resume()
    return source
}
stop.wait()
emulator.stop()
withExtendedLifetime(sources) {}
