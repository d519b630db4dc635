import Metrics
import Synchronization

/// The sender's single owner of a `SenderMismatchBrake`: answers go in from the HTTP driver thread under a
/// lock, verdicts come out counted (`fcm_sender_id_mismatch_total`), and `fcm_sender_id_mismatch_fault` is 1
/// from a project-fault verdict until sending resumes.
final class SenderMismatchGuard: Sendable {
    private let brake = Mutex(SenderMismatchBrake())
    /// The brake's window is full of healthy answers: a healthy answer is skipped without hashing its token or taking
    /// the lock (the common case, once per send).
    private let settled = Atomic<Bool>(false)
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
        guard !settled.load(ordering: .relaxed) else { return }
        let device = SenderMismatchBrake.device(token)
        brake.withLock { brake in
            brake.healthy(device: device)
            // Under the lock, so it never outlives a mismatch recorded after it.
            if brake.isFullAndHealthy { settled.store(true, ordering: .relaxed) }
        }
    }

    /// A device answered SENDER_ID_MISMATCH: what to make of it.
    func mismatch(token: String) -> SenderMismatchBrake.Verdict {
        let device = SenderMismatchBrake.device(token)
        let verdict = brake.withLock { brake in
            settled.store(false, ordering: .relaxed)
            return brake.mismatch(device: device)
        }
        verdicts[verdict]?.increment()
        if verdict == .projectFault { fault.set(1) }
        return verdict
    }

    /// Sending resumed after a successful probe.
    func recovered() {
        brake.withLock { brake in
            brake.recovered()
            settled.store(brake.isFullAndHealthy, ordering: .relaxed)
        }
        fault.set(0)
    }
}
