import Metrics
import Synchronization

/// The sender's single owner of a `DisableBrake`: answers go in from the HTTP driver thread under a lock, verdicts come
/// out counted. The metric names are the SENDER_ID_MISMATCH brake's, which operators' alerts already use, with the
/// answer as a label: `fcm_sender_id_mismatch_total{answer,verdict}`, and `fcm_sender_id_mismatch_fault{answer}` 1
/// from a project-fault verdict (for the answer most devices gave) until sending resumes.
final class DisableGuard: Sendable {
    private let brake = Mutex(DisableBrake())
    /// The brake's window is full of healthy answers: a healthy answer is skipped without hashing its token or taking
    /// the lock (the common case, once per send).
    private let settled = Atomic<Bool>(false)
    private let faults: [DisableBrake.Answer: Gauge]
    private let verdicts: [DisableBrake.Answer: [DisableBrake.Verdict: Counter]]

    init(metrics: MetricsRegistry) {
        var faults: [DisableBrake.Answer: Gauge] = [:]
        var verdicts: [DisableBrake.Answer: [DisableBrake.Verdict: Counter]] = [:]
        for answer in DisableBrake.Answer.allCases {
            faults[answer] = metrics.gauge("fcm_sender_id_mismatch_fault",
                                           help: "1 while sending is paused because most devices give this disabling answer (SENDER_ID_MISMATCH: a service account of another Firebase project; NOT_FOUND, UNREGISTERED, INVALID_ARGUMENT: the project, the URL or a proxy).",
                                           labels: ["answer": answer.rawValue])
            for verdict in DisableBrake.Verdict.allCases {
                verdicts[answer, default: [:]][verdict] = metrics.counter(
                    "fcm_sender_id_mismatch_total",
                    help: "Answers that would disable a device (SENDER_ID_MISMATCH, UNREGISTERED, NOT_FOUND, INVALID_ARGUMENT) by verdict: device disabled, project fault (most devices answer so), undecided (retried).",
                    labels: ["answer": answer.rawValue, "verdict": verdict.rawValue])
            }
        }
        self.faults = faults
        self.verdicts = verdicts
    }

    /// A device answered in a way that shows FCM knows the project and the token (accepted, its own message rate).
    func healthy(token: String) {
        guard !settled.load(ordering: .relaxed) else { return }
        let device = DisableBrake.device(token)
        brake.withLock { brake in
            brake.healthy(device: device)
            // Under the lock, so it never outlives a disabling answer recorded after it.
            if brake.isFullAndHealthy { settled.store(true, ordering: .relaxed) }
        }
    }

    /// A device gave an answer that would disable it: what to make of it.
    func disabling(_ answer: DisableBrake.Answer, token: String) -> DisableBrake.Judgement {
        let device = DisableBrake.device(token)
        let judgement = brake.withLock { brake in
            settled.store(false, ordering: .relaxed)
            return brake.disabling(answer, device: device)
        }
        verdicts[answer]?[judgement.verdict]?.increment()
        if judgement.verdict == .projectFault { faults[judgement.dominant]?.set(1) }
        return judgement
    }

    /// Sending resumed after a successful probe.
    func recovered() {
        brake.withLock { brake in
            brake.recovered()
            settled.store(brake.isFullAndHealthy, ordering: .relaxed)
        }
        for gauge in faults.values { gauge.set(0) }
    }
}
