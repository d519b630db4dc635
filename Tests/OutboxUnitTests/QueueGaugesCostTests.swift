@testable import Outbox
import Testing

/// The queue counts cost the database at most 2% of one connection's time whatever the backlog: the holder counts
/// again only once 50 times its last count's duration has passed.
@Suite struct QueueGaugesCostTests {
    @Test func aCheapCount_isTakenEveryRefresh_anExpensiveOneLessOften() {
        // Nothing published yet: count.
        #expect(QueueGauges.countIsDue(lastCostSeconds: 0, publishedAgeSeconds: nil))
        // A 2 ms count is due again after 0.1 s: every 5 s refresh counts.
        #expect(QueueGauges.countIsDue(lastCostSeconds: 0.002, publishedAgeSeconds: 5))
        // A 0.4 s count (a 1,000,000-delivery backlog) waits 20 s: the refreshes in between read the last snapshot.
        #expect(!QueueGauges.countIsDue(lastCostSeconds: 0.4, publishedAgeSeconds: 5))
        #expect(!QueueGauges.countIsDue(lastCostSeconds: 0.4, publishedAgeSeconds: 19.9))
        #expect(QueueGauges.countIsDue(lastCostSeconds: 0.4, publishedAgeSeconds: 20))
    }
}
