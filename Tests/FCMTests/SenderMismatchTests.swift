import FCM
import FCMEmulator
import Foundation
import Push
import Synchronization
import Testing
import TestSupport

/// "A disable needs a witness" over the wire for SENDER_ID_MISMATCH (SPEC §3): a stale token, or a key of another project.
@Suite("SENDER_ID_MISMATCH: a stale token or a wrong key", .blockingFixtures)
struct SenderMismatchTests {
    static let pausedForWrongKey: @Sendable (FCMHealth) -> Bool = { health in
        if case .paused(.project, let reason) = health { reason.hasPrefix("SENDER_ID_MISMATCH for a token that received pushes") } else { false }
    }

    /// A stale token after a healthy answer: the dry run to the healthy token witnesses it, and it is disabled.
    @Test func staleToken_isWitnessedByADryRun_andDisabled() async throws {
        let rig = try FCMSenderTests.rig()
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        guard case .sent = await rig.sender.send(FCMSenderTests.push("good-0")) else { Issue.record("not sent"); return }
        #expect(await rig.sender.send(FCMSenderTests.push("mismatch-stale")) == .tokenInvalid(.senderIdMismatch, witnessed: true))
        #expect(rig.metrics.value("fcm_disabling_answers_total", labels: ["answer": "SENDER_ID_MISMATCH", "verdict": "witnessed"]) == 1)
        #expect(rig.metrics.value("fcm_dry_runs_total", labels: ["result": "accepted"]) == 1)
        #expect(rig.metrics.value("fcm_send_paused", labels: ["cause": "SENDER_ID_MISMATCH"]) == 0)
        #expect(rig.emulator.stats.sendsByOutcome["validate_only"] == 1)
    }

    /// A key of another project after a healthy start: the dry run to the token FCM accepted answers SENDER_ID_MISMATCH
    /// too. Nothing is disabled, sending pauses naming SENDER_ID_MISMATCH and the key's project; once FCM accepts the
    /// key, the probe resumes sending and dead tokens are witnessed again.
    @Test func wrongKey_disablesNothing_pausesNamingIt_andResumesAfterTheProbe() async throws {
        let health = Recorder<FCMHealth>()
        let rig = try FCMSenderTests.rig(onHealth: { state in health.record(state) })
        defer { rig.sender.shutdown(); rig.emulator.stop() }
        guard case .sent = await rig.sender.send(FCMSenderTests.push("fleet-0")) else { Issue.record("not sent"); return }
        rig.emulator.setProjectFault(.senderIdMismatch)
        #expect(await rig.sender.send(FCMSenderTests.push("fleet-1")) == .retry(reason: "PROJECT_FAULT: SENDER_ID_MISMATCH", after: nil, minimumBackoff: nil))
        let paused = try #require(health.last)
        #expect(Self.pausedForWrongKey(paused), "\(paused)")
        guard case .paused(_, let reason) = paused else { return }
        #expect(reason.contains("project test-project") && reason.contains("FCM_SERVICE_ACCOUNT_FILE"))
        #expect(rig.metrics.value("fcm_send_paused", labels: ["cause": "SENDER_ID_MISMATCH"]) == 1)
        #expect(rig.metrics.value("fcm_disabling_answers_total", labels: ["answer": "SENDER_ID_MISMATCH", "verdict": "project_fault"]) == 1)
        #expect(rig.metrics.value("fcm_dry_runs_total", labels: ["result": "refused"]) == 1)

        rig.emulator.setProjectFault(nil)
        // Held until the pause ends (about a second), then sent as the probe, which resumes sending.
        guard case .sent = await rig.sender.send(FCMSenderTests.push("fleet-2")) else { Issue.record("not sent after the fix"); return }
        #expect(health.last == .ok)
        #expect(rig.metrics.value("fcm_send_paused", labels: ["cause": "SENDER_ID_MISMATCH"]) == 0)
        #expect(await rig.sender.send(FCMSenderTests.push("mismatch-stale")) == .tokenInvalid(.senderIdMismatch, witnessed: true))
    }
}
