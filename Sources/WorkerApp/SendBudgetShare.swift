import FCM
import Logging
import Outbox
import Synchronization

/// This instance's share of `FCM_MAX_SENDS_PER_SECOND`, taken at every heartbeat through the live-instances table
/// (`LiveInstances.heartbeat`: an even split, never more than the others' recorded shares leave) and handed to the
/// sender, which holds every send until the first share comes; logged when it changes.
struct SendBudgetShare: Sendable {
    /// The project's sends per second, shared by the live instances.
    let budget: Int
    let sender: FCMSender
    let logger: Logger
    /// The live instances and the share last logged.
    private let logged = LastLogged()

    init(budget: Int, sender: FCMSender, logger: Logger) {
        self.budget = budget
        self.sender = sender
        self.logger = logger
    }

    /// A lower share, applied before the heartbeat records it.
    func lower(_ share: Double) { sender.setSendBudget(perSecond: share) }

    /// The share a heartbeat recorded; logged when it or the number of live instances changed.
    func took(_ heartbeat: LiveInstances.Heartbeat) {
        let share = heartbeat.share ?? Double(budget)
        sender.setSendBudget(perSecond: share)
        let changed = logged.value.withLock { last in
            defer { last = (heartbeat.live, share) }
            return last.map { $0.live != heartbeat.live || $0.share != share } ?? true
        }
        guard changed else { return }
        var metadata: LogMetadata = [
            "fcm.budget": "\(budget)/s", "instances.live": "\(heartbeat.live)", "fcm.send_rate_limit": "\(Int(share.rounded(.down)))/s",
        ]
        if heartbeat.waiting { metadata["fcm.budget_held_by_others"] = "\(Int((Double(budget) - share).rounded(.up)))/s" }
        logger.info("FCM send budget shared", metadata: metadata)
    }
}

/// The live instances and the share last logged, shared by the heartbeat's rounds.
private final class LastLogged: Sendable {
    let value = Mutex<(live: Int, share: Double)?>(nil)
}
