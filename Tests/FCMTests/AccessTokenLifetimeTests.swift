import FCM
import Foundation
import Push
import Testing
import TestSupport

/// Access tokens that live less than the refresh margin (SPEC §3: "at a fixed fraction of its life, never per send").
@Suite("FCM access tokens: short lifetimes", .blockingFixtures)
struct AccessTokenLifetimeTests {
    @Test(arguments: [(3600.0, 300.0, 60.0), (600, 300, 60), (300, 150, 60), (90, 45, 22.5), (2, 1, 0.5)])
    func margins_areAFractionOfAShortLife(lifetime: Double, refresh: Double, expiry: Double) {
        let margins = AccessTokenProvider.margins(lifetime: lifetime)
        #expect(margins.refresh == refresh)
        #expect(margins.expiry == expiry)
    }

    /// A token that lives 90 s (the margin is 300 s): 150 sends spread over 2.5 lifetimes by an injected clock fetch
    /// a token at start and about one every half life, not one per send.
    @Test func shortLivedToken_isRefreshedAtHalfItsLife_notPerSend() async throws {
        // In the past, so that moved on by 225 s the assertions' iat is still acceptable to the emulator.
        let clock = TestClock(Date().addingTimeInterval(-250))
        let rig = try FCMSenderTests.rig(tokenLifetime: 90, now: { clock.now })
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        var sent = 0
        for index in 0..<150 {
            if case .sent = await rig.sender.send(FCMSenderTests.push("good-\(index)")) { sent += 1 }
            clock.now = clock.now.addingTimeInterval(1.5)
        }
        // Let a background refresh started by the last send finish before counting.
        try await Task.sleep(for: .milliseconds(300))
        #expect(sent == 150)
        let requests = rig.emulator.stats.tokenRequests
        // One at start, then one per 45 s of the 225 s: at most 6 (150 before the fix).
        #expect(requests >= 4 && requests <= 6, "\(requests) token requests for 150 sends over 225 s")
        #expect(rig.emulator.stats.sendsByOutcome["unauthenticated"] == nil)
    }
}
