import FCM
import FCMEmulator
import Foundation
import Push
import Synchronization
import Testing
import TestSupport

/// The disable brake over the wire for SENDER_ID_MISMATCH (SPEC §3 "A wrong key is not evidence against the fleet").
@Suite("SENDER_ID_MISMATCH: a stale token or a wrong key", .blockingFixtures)
struct SenderMismatchTests {
    static let pausedForWrongKey: @Sendable (FCMHealth) -> Bool = { health in
        if case .paused(.project, let reason) = health { reason.contains("SENDER_ID_MISMATCH") } else { false }
    }

    /// A stale token is retried while no other device has answered, and disabled once others have answered healthy.
    @Test func staleToken_isRetriedAlone_andDisabledAmongHealthyDevices() async throws {
        let rig = try FCMSenderTests.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        #expect(await rig.sender.send(FCMSenderTests.push("mismatch-stale"))
                == .retry(reason: "SENDER_ID_MISMATCH_UNCONFIRMED", after: .seconds(2), minimumBackoff: nil))
        for index in 0..<3 {
            guard case .sent = await rig.sender.send(FCMSenderTests.push("good-\(index)")) else { Issue.record("not sent"); return }
        }
        #expect(await rig.sender.send(FCMSenderTests.push("mismatch-stale")) == .tokenInvalid(reason: "SENDER_ID_MISMATCH"))
        #expect(rig.metrics.value("fcm_sender_id_mismatch_total", labels: ["answer": "SENDER_ID_MISMATCH", "verdict": "undecided"]) == 1)
        #expect(rig.metrics.value("fcm_sender_id_mismatch_total", labels: ["answer": "SENDER_ID_MISMATCH", "verdict": "disabled"]) == 1)
        #expect(rig.metrics.value("fcm_sender_id_mismatch_fault", labels: ["answer": "SENDER_ID_MISMATCH"]) == 0)
        #expect(rig.metrics.value("fcm_send_paused") == 0)
    }

    /// Every device answers SENDER_ID_MISMATCH: nothing is disabled, the third answer pauses sending as a project
    /// fault naming SENDER_ID_MISMATCH and the key's project; once FCM accepts the key, the probe resumes sending.
    @Test func wrongKey_disablesNothing_pausesNamingIt_andResumesAfterTheProbe() async throws {
        let health = Recorder<FCMHealth>()
        let rig = try FCMSenderTests.rig(onHealth: { state in health.record(state) })
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        rig.emulator.setProjectFault(.senderIdMismatch)
        var outcomes: [SendOutcome] = []
        for index in 0..<3 { outcomes.append(await rig.sender.send(FCMSenderTests.push("fleet-\(index)"))) }
        #expect(outcomes == [
            .retry(reason: "SENDER_ID_MISMATCH_UNCONFIRMED", after: .seconds(2), minimumBackoff: nil),
            .retry(reason: "SENDER_ID_MISMATCH_UNCONFIRMED", after: .seconds(2), minimumBackoff: nil),
            .retry(reason: "PROJECT_FAULT: SENDER_ID_MISMATCH", after: nil, minimumBackoff: nil),
        ])
        let paused = try #require(health.last)
        #expect(Self.pausedForWrongKey(paused), "\(paused)")
        guard case .paused(_, let reason) = paused else { return }
        #expect(reason.contains("project test-project") && reason.contains("FCM_SERVICE_ACCOUNT_FILE"))
        #expect(rig.metrics.value("fcm_sender_id_mismatch_fault", labels: ["answer": "SENDER_ID_MISMATCH"]) == 1)
        #expect(rig.metrics.value("fcm_send_paused") == 1)
        #expect(rig.metrics.value("fcm_sender_id_mismatch_total", labels: ["answer": "SENDER_ID_MISMATCH", "verdict": "disabled"]) == 0)

        rig.emulator.setProjectFault(nil)
        // Held until the pause ends (about a second), then sent as the probe, which resumes sending.
        guard case .sent = await rig.sender.send(FCMSenderTests.push("fleet-3")) else { Issue.record("not sent after the fix"); return }
        #expect(health.last == .ok)
        #expect(rig.metrics.value("fcm_sender_id_mismatch_fault", labels: ["answer": "SENDER_ID_MISMATCH"]) == 0)
        // The episode is forgotten: after three healthy answers a stale token is disabled, not taken for a wrong key.
        for index in 4..<7 { _ = await rig.sender.send(FCMSenderTests.push("fleet-\(index)")) }
        #expect(await rig.sender.send(FCMSenderTests.push("mismatch-stale")) == .tokenInvalid(reason: "SENDER_ID_MISMATCH"))
    }
}
