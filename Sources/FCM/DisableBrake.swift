/// Tells a dead token from a fault of the project (docs/operations.md, "The disable brake: a dead token, or a fault of
/// the project"). FCM answers UNREGISTERED, a plain 404 NOT_FOUND, an invalid token or SENDER_ID_MISMATCH both for one
/// stale token and for every token when the project, the URL or something on the way is wrong (a deleted or mistyped
/// project, a path rewritten by a proxy, a service account of another project); only the other devices' answers tell
/// the two apart. The brake keeps the last `windowSize` answers from distinct devices (a device answering again
/// replaces its entry) and judges each disabling answer, in any mix, against them. A value: its owner serialises access
/// and carries out the verdict.
package struct DisableBrake: Sendable {
    /// An answer that would disable its device; the raw value names it in `/readyz`, the log and the metrics.
    package enum Answer: String, Sendable, Equatable, CaseIterable {
        /// 404 with the FcmError detail UNREGISTERED.
        case unregistered = "UNREGISTERED"
        /// Google's plain 404 NOT_FOUND without an FcmError detail (taken as UNREGISTERED for one device).
        case notFound = "NOT_FOUND"
        /// 400 INVALID_ARGUMENT naming the registration token.
        case invalidToken = "INVALID_ARGUMENT"
        /// 403 SENDER_ID_MISMATCH.
        case senderIdMismatch = "SENDER_ID_MISMATCH"
    }

    /// What to do with a disabling answer.
    package enum Verdict: String, Sendable, Equatable, CaseIterable {
        /// Enough healthy answers around it: this token is dead, disable the device.
        case disable = "disabled"
        /// Disabling answers are the majority: the project is at fault; pause sending, disable nothing.
        case projectFault = "project_fault"
        /// Too little evidence either way: retry the send later, disable nothing, do not pause.
        case undecided
    }

    /// A verdict and what goes with it.
    package struct Judgement: Sendable, Equatable {
        package var verdict: Verdict
        /// For `disable`: the window is full and this answer is one of at most `vouchLimit` disabling ones in it, so the
        /// brake vouches for it; the fleet's cap (`disableDevicesQuery`) does not count a vouched disable for long.
        package var vouched: Bool
        /// The most frequent disabling answer in the window (the newest on a tie): what `/readyz` names.
        package var dominant: Answer

        package init(_ verdict: Verdict, vouched: Bool = false, dominant: Answer) {
            self.verdict = verdict
            self.vouched = vouched
            self.dominant = dominant
        }
    }

    /// Distinct devices remembered.
    package static let windowSize = 20
    /// Disabling answers needed before a project fault is declared (a fresh instance's first two are retried).
    package static let minimumEvidence = 3
    /// Healthy answers needed before a disable: one device answering normally shows FCM knows the project and the path,
    /// so a small deployment (one healthy phone, one dead) still disables its dead token.
    package static let minimumHealthy = 1
    /// Disabling answers (this one included) a full window may hold for the brake to vouch for a disable. The first
    /// answers of a project-wide fault look the same, so each instance may vouch for this many at its onset: the fleet's
    /// short window (`disableDevicesQuery`) bounds those.
    package static let vouchLimit = 2

    /// Oldest first; `device` is a hash of the token (the brake never holds a token); `answer` nil: healthy.
    private var entries: [(device: Int, answer: Answer?)] = []

    package init() {}

    /// The verdict for a disabling answer, given the window's disabling entries (that one included) and healthy entries.
    /// With a window of 20, `disable` needs `m <= h`, so one instance disables at most 10 devices after any history.
    package static func verdict(disabling m: Int, healthy h: Int) -> Verdict {
        if m >= minimumEvidence && m > h { return .projectFault }
        if h >= minimumHealthy && m <= h { return .disable }
        return .undecided
    }

    /// Records a device's healthy answer.
    package mutating func healthy(device: Int) { record(device, nil) }

    /// Records a device's disabling answer and judges it against the window.
    package mutating func disabling(_ answer: Answer, device: Int) -> Judgement {
        record(device, answer)
        let counts = self.counts
        let verdict = Self.verdict(disabling: counts.disabling, healthy: counts.healthy)
        let vouched = verdict == .disable && entries.count == Self.windowSize && counts.disabling <= Self.vouchLimit
        return Judgement(verdict, vouched: vouched, dominant: dominant ?? answer)
    }

    /// Sending resumed after a successful probe: forget the disabling answers, so stale entries from the episode cannot
    /// trip the brake again; a dead token answering afterwards is judged against fresh answers.
    package mutating func recovered() { entries.removeAll { $0.answer != nil } }

    /// The window is full of healthy answers: another healthy answer changes no verdict, so the owner may skip it.
    package var isFullAndHealthy: Bool { entries.count == Self.windowSize && !entries.contains { $0.answer != nil } }

    /// Disabling and healthy entries in the window.
    package var counts: (disabling: Int, healthy: Int) {
        let disabling = entries.count { $0.answer != nil }
        return (disabling, entries.count - disabling)
    }

    /// The most frequent disabling answer in the window, the newest on a tie; nil when there is none.
    package var dominant: Answer? {
        var tally: [Answer: Int] = [:]
        var best: (answer: Answer, count: Int)?
        for case let (_, answer?) in entries {
            tally[answer, default: 0] += 1
            if let current = best, current.count > tally[answer]! { continue }
            best = (answer, tally[answer]!)
        }
        return best?.answer
    }

    /// The window key of a registration token.
    package static func device(_ token: String) -> Int {
        var hasher = Hasher()
        hasher.combine(token)
        return hasher.finalize()
    }

    private mutating func record(_ device: Int, _ answer: Answer?) {
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
