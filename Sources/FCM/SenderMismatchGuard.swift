import Metrics
import Synchronization

/// The sender's single owner of a `SenderMismatchBrake`: answers go in from the HTTP driver thread under a
/// lock, verdicts come out counted (`fcm_sender_id_mismatch_total`), and `fcm_sender_id_mismatch_fault` is 1
/// from a project-fault verdict until sending resumes.
final class SenderMismatchGuard: Sendable {
    private let brake = Mutex(SenderMismatchBrake())
    private let fault: Gauge
    private let verdicts: [SenderMismatchBrake.Verdict: Counter]

    init(metrics: MetricsRegistry) {
        fault = metrics.gauge("fcm_sender_id_mismatch_fault",
                              help: "1 while sending is paused because SENDER_ID_MISMATCH is most answers (a service account of another Firebase project).")
        var verdicts: [SenderMismatchBrake.Verdict: Counter] = [:]
        for verdict in SenderMismatchBrake.Verdict.allCases {
            verdicts[verdict] = metrics.counter("fcm_sender_id_mismatch_total",
                                                help: "SENDER_ID_MISMATCH answers by verdict: device disabled, project fault (wrong key), undecided (retried).",
                                                labels: ["verdict": verdict.rawValue])
        }
        self.verdicts = verdicts
    }

    /// A device answered in a way that proves the key belongs to its token's project.
    func healthy(token: String) {
        let device = SenderMismatchBrake.device(token)
        brake.withLock { $0.healthy(device: device) }
    }

    /// A device answered SENDER_ID_MISMATCH: what to make of it.
    func mismatch(token: String) -> SenderMismatchBrake.Verdict {
        let device = SenderMismatchBrake.device(token)
        let verdict = brake.withLock { $0.mismatch(device: device) }
        verdicts[verdict]?.increment()
        if verdict == .projectFault { fault.set(1) }
        return verdict
    }

    /// Sending resumed after a successful probe.
    func recovered() {
        brake.withLock { $0.recovered() }
        fault.set(0)
    }
}
