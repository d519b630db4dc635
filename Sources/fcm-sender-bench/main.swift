import FCM
import Foundation
import HTTP
import Logging
import Metrics
import Push
import Synchronization
import Timekeeping

// fcm-sender-bench: the FCM sender alone, N sends at a given in-flight bound, against whatever
// FCM_BASE_URL points at (scripts/bench-sender points it at nginx over HTTP/2).
//   FCM_SERVICE_ACCOUNT_FILE=… FCM_BASE_URL=… TLS_CA_FILE=… fcm-sender-bench COUNT IN_FLIGHT

let environment = ProcessInfo.processInfo.environment
let arguments = CommandLine.arguments
guard arguments.count == 3, let count = Int(arguments[1]), let inFlight = Int(arguments[2]),
      let accountPath = environment["FCM_SERVICE_ACCOUNT_FILE"], let base = environment["FCM_BASE_URL"] else {
    FileHandle.standardError.write(Data("usage: FCM_SERVICE_ACCOUNT_FILE=… FCM_BASE_URL=… [TLS_CA_FILE=…] fcm-sender-bench COUNT IN_FLIGHT\n".utf8))
    exit(64)
}
let account = try ServiceAccount.load(path: accountPath)
let sender = try FCMSender(configuration: FCMConfiguration(serviceAccount: account, baseURL: base,
                                                           http: HTTPClientConfiguration(maxInFlight: inFlight, caFile: environment["TLS_CA_FILE"])),
                           logger: Logger(label: "bench", logLevel: .error, sink: TextSink()), metrics: MetricsRegistry())
try await sender.checkCredentials()

/// The engine's way of sending: each answer (on the HTTP driver thread) starts the next send.
final class Pump: Sendable {
    let sender: FCMSender
    let count: Int
    let state = Mutex<(next: Int, answered: Int, sent: Int)>((0, 0, 0))
    let done = DispatchSemaphore(value: 0)

    init(sender: FCMSender, count: Int) {
        self.sender = sender
        self.count = count
    }

    func push(_ index: Int) -> DoseTakenPush {
        DoseTakenPush(token: "bench-token-\(index)", eventKey: "doseTaken:bench-\(index)", patientId: "p\(index % 1000)",
                      displayName: "患者", date: "2026-02-11", slot: "morning", recordingGroupId: "bench-\(index)", withinTime: true)
    }

    func startNext() {
        let index = state.withLock { state -> Int? in
            guard state.next < count else { return nil }
            defer { state.next += 1 }
            return state.next
        }
        guard let index else { return }
        sender.start(push(index)) { [self] outcome in
            let finished = state.withLock { state -> Bool in
                state.answered += 1
                if case .sent = outcome { state.sent += 1 }
                return state.answered == count
            }
            if finished { done.signal() } else { startNext() }
        }
    }
}

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

let pump = Pump(sender: sender, count: count)
let cpuBefore = cpuSeconds()
let started = ContinuousClock.now
for _ in 0..<min(inFlight, count) { pump.startNext() }
await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
    DispatchQueue.global().async { pump.done.wait(); continuation.resume() }
}
let elapsed = ContinuousClock.now - started
let cpu = cpuSeconds() - cpuBefore
let seconds = elapsed.asSeconds
let sent = pump.state.withLock { $0.sent }
/// A line of /proc/self/status in MiB (VmHWM: the peak resident set; RssAnon: the heap and stacks now).
func statusMiB(_ field: String) -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix(field + ":") }
    let kB = line.flatMap { Double($0.split(separator: " ").dropFirst().first { !$0.isEmpty }.map(String.init) ?? "") } ?? 0
    return kB / 1024
}
print(String(format: "in-flight %d: %d/%d sent in %.2f s = %.0f sends/s, %.1f us CPU per send, %d connection(s) opened incl. the token endpoint; peak RSS %.1f MiB, anon now %.1f MiB",
             inFlight, sent, count, seconds, Double(sent) / seconds, cpu * 1e6 / Double(max(sent, 1)), sender.http.connectionsOpened,
             statusMiB("VmHWM"), statusMiB("RssAnon")))
sender.shutdown()
