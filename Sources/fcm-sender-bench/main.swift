import FCM
import Foundation
import HTTP
import Logging
import Metrics

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
let started = ContinuousClock.now
let sent = await withTaskGroup(of: Bool.self, returning: Int.self) { group in
    var next = 0
    var done = 0
    func push(_ index: Int) -> DoseTakenPush {
        DoseTakenPush(token: "bench-token-\(index)", eventKey: "doseTaken:bench-\(index)", patientId: "p\(index % 1000)",
                      displayName: "患者", date: "2026-02-11", slot: "morning", recordingGroupId: "bench-\(index)", withinTime: true)
    }
    while next < min(inFlight, count) {
        let index = next
        group.addTask { if case .sent = await sender.send(push(index)) { return true } else { return false } }
        next += 1
    }
    for await ok in group {
        if ok { done += 1 }
        if next < count {
            let index = next
            group.addTask { if case .sent = await sender.send(push(index)) { return true } else { return false } }
            next += 1
        }
    }
    return done
}
let elapsed = ContinuousClock.now - started
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
print(String(format: "in-flight %d: %d/%d sent in %.2f s = %.0f sends/s, %d connection(s) opened incl. the one to the token endpoint",
             inFlight, sent, count, seconds, Double(sent) / seconds, sender.http.connectionsOpened))
sender.shutdown()
