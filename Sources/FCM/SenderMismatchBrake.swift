/// Tells a stale token from a wrong key (SPEC §3 "A wrong key is not evidence against the fleet"). FCM answers
/// SENDER_ID_MISMATCH both for a token registered with another sender and for every token when the service
/// account belongs to another Firebase project; only the other devices' answers tell the two apart. The brake
/// keeps the last `windowSize` answers from distinct devices (a device answering again replaces its entry) and
/// judges each mismatch against them. A value: its owner serialises access and carries out the verdict.
package struct SenderMismatchBrake: Sendable {
    /// What one device's latest answer said about the service account.
    package enum Answer: Sendable, Equatable {
        /// SENDER_ID_MISMATCH.
        case mismatch
        /// A 200, or another device-level answer (UNREGISTERED, an invalid token): the key is the tokens' project's.
        case healthy
    }

    /// What to do with a SENDER_ID_MISMATCH answer.
    package enum Verdict: String, Sendable, Equatable, CaseIterable {
        /// Enough healthy answers around it: this token is stale, disable the device.
        case disable = "disabled"
        /// Mismatch is the majority: the key is wrong; pause sending, disable nothing.
        case projectFault = "project_fault"
        /// Too little evidence either way: retry the send later, disable nothing, do not pause.
        case undecided
    }

    /// Distinct devices remembered.
    package static let windowSize = 20
    /// Answers of one kind needed before either verdict is given.
    package static let minimumEvidence = 3

    /// Oldest first; `device` is a hash of the token (the brake never holds a token).
    private var entries: [(device: Int, answer: Answer)] = []

    package init() {}

    /// The verdict for a mismatch, given the window's mismatch entries (that one included) and healthy entries.
    /// With a window of 20, `disable` needs `m <= h`, so a wrong key disables at most 10 devices after any history.
    package static func verdict(mismatches m: Int, healthy h: Int) -> Verdict {
        if m >= minimumEvidence && m > h { return .projectFault }
        if h >= minimumEvidence && m <= h { return .disable }
        return .undecided
    }

    /// Records a device's healthy answer.
    package mutating func healthy(device: Int) { record(device, .healthy) }

    /// Records a device's SENDER_ID_MISMATCH and judges it against the window.
    package mutating func mismatch(device: Int) -> Verdict {
        record(device, .mismatch)
        let counts = self.counts
        return Self.verdict(mismatches: counts.mismatches, healthy: counts.healthy)
    }

    /// Sending resumed after a successful probe: forget the mismatches, so stale entries from the episode cannot
    /// trip the brake again; a stale token answering afterwards is judged against fresh answers.
    package mutating func recovered() { entries.removeAll { $0.answer == .mismatch } }

    /// The window is full of healthy answers: another healthy answer changes no verdict, so the owner may skip it.
    package var isFullAndHealthy: Bool { entries.count == Self.windowSize && !entries.contains { $0.answer == .mismatch } }

    /// Mismatch and healthy entries in the window.
    package var counts: (mismatches: Int, healthy: Int) {
        let mismatches = entries.count { $0.answer == .mismatch }
        return (mismatches, entries.count - mismatches)
    }

    /// The window key of a registration token.
    package static func device(_ token: String) -> Int {
        var hasher = Hasher()
        hasher.combine(token)
        return hasher.finalize()
    }

    private mutating func record(_ device: Int, _ answer: Answer) {
        if let index = entries.firstIndex(where: { $0.device == device }) {
            // Healthy traffic mostly repeats the newest devices: skip the move when nothing changes.
            if index == entries.count - 1, entries[index].answer == answer { return }
            entries.remove(at: index)
        } else if entries.count == Self.windowSize {
            entries.removeFirst()
        }
        entries.append((device, answer))
    }
}
