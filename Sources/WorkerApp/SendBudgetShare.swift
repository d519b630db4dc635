import FCM
import Logging

/// This instance's share of `FCM_MAX_SENDS_PER_SECOND`: the budget split evenly among
/// the live instances, handed to the sender at every heartbeat; logged when it changes.
struct SendBudgetShare: Sendable {
    let budget: Int
    let sender: FCMSender
    let logger: Logger
    private let lastLive = SharedCount()

    init(budget: Int, sender: FCMSender, logger: Logger) {
        self.budget = budget
        self.sender = sender
        self.logger = logger
    }

    /// Each instance's sends per second when `live` instances share the budget.
    static func share(of budget: Int, live: Int) -> Double { Double(budget) / Double(max(1, live)) }

    /// Hands the sender its share for `live` instances; logs when their number changed.
    func live(_ live: Int) {
        let share = Self.share(of: budget, live: live)
        sender.setSendBudget(perSecond: share)
        if lastLive.set(live) != live {
            logger.info("FCM send budget shared", metadata: [
                "fcm.budget": "\(budget)/s", "instances.live": "\(live)", "fcm.send_rate_limit": "\(Int(share.rounded(.down)))/s",
            ])
        }
    }
}
