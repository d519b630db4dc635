import Crypto
import Foundation

/// Builds the FCM HTTP v1 request body of SPEC §3 for one DOSE_TAKEN push.
public enum FCMMessage {
    public static let title = "服薬記録"

    /// The notification body: `{name}さんが薬を服用しました`, or the "within time" variant.
    public static func body(displayName: String, withinTime: Bool) -> String {
        withinTime ? "\(displayName)さんが時間内に薬を服用しました" : "\(displayName)さんが薬を服用しました"
    }

    /// `apns-collapse-id`: the eventKey when it fits APNs' 64-byte limit, else a stable hash of it.
    public static func collapseId(eventKey: String) -> String {
        if eventKey.utf8.count <= 64 { return eventKey }
        return "doseTaken:" + Digest.hex(Digest.sha256(Array(eventKey.utf8))).prefix(54)
    }

    /// The JSON body `{"message": {...}}` (all `data` values are strings, as FCM requires).
    public static func json(for push: DoseTakenPush) -> [UInt8] {
        let message: [String: Any] = [
            "message": [
                "token": push.token,
                "notification": ["title": title, "body": body(displayName: push.displayName, withinTime: push.withinTime)],
                "data": [
                    "type": "DOSE_TAKEN",
                    "patientId": push.patientId,
                    "date": push.date,
                    "slot": push.slot,
                    "recordingGroupId": push.recordingGroupId ?? "",
                ],
                "apns": [
                    "headers": ["apns-collapse-id": collapseId(eventKey: push.eventKey)],
                    "payload": ["aps": ["sound": "default", "thread-id": "patient-\(push.patientId)"]],
                ],
            ] as [String: Any],
        ]
        // Only strings and dictionaries above: serialisation cannot fail.
        let data = (try? JSONSerialization.data(withJSONObject: message, options: [.withoutEscapingSlashes])) ?? Data("{}".utf8)
        return Array(data)
    }
}
