import Crypto
import FoundationEssentials
import Push

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

    /// FCM refuses a message over 4,096 bytes; the whole request body stays within it.
    public static let maxBodyBytes = 4096
    /// Appended to a display name shortened to fit.
    public static let ellipsis = "…"

    /// The JSON body `{"message": {...}}` (all `data` values are strings, as FCM requires), never over
    /// `maxBodyBytes`: a display name too long to fit is shortened by whole grapheme clusters and ends with `…`;
    /// nothing else is shortened. Written directly: this runs once per push, and every value is a string.
    public static func json(for push: DoseTakenPush) -> [UInt8] {
        let body = encode(push, displayName: push.displayName)
        guard body.count > maxBodyBytes else { return body }
        return encode(push, displayName: fitted(push.displayName, budget: maxBodyBytes - (encode(push, displayName: "").count)))
    }

    /// The longest prefix of `name`, in whole grapheme clusters, that with `…` takes at most `budget` bytes once
    /// JSON-escaped ("" when not even `…` fits).
    static func fitted(_ name: String, budget: Int) -> String {
        let room = budget - escapedCount(ellipsis)
        guard room >= 0 else { return "" }
        var used = 0
        var end = name.startIndex
        for character in name {
            let cost = escapedCount(String(character))
            if used + cost > room { break }
            used += cost
            end = name.index(after: end)
        }
        return String(name[..<end]) + ellipsis
    }

    /// Bytes a string takes as a JSON string body (without its quotes), as `encode` writes it.
    static func escapedCount(_ text: String) -> Int {
        var count = 0
        for byte in text.utf8 {
            switch byte {
            case 0x22, 0x5C, 0x0A, 0x0D, 0x09: count += 2
            case ..<0x20: count += 6
            default: count += 1
            }
        }
        return count
    }

    private static func encode(_ push: DoseTakenPush, displayName: String) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(640 + push.token.utf8.count)
        func raw(_ text: StaticString) { text.withUTF8Buffer { out.append(contentsOf: $0) } }
        func string(_ value: String) {
            out.append(0x22)
            var value = value
            value.withUTF8 { bytes in
                // Runs that need no escape (nearly every value) are copied whole.
                var runStart = 0
                for (index, byte) in bytes.enumerated() where byte == 0x22 || byte == 0x5C || byte < 0x20 {
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                    runStart = index + 1
                    switch byte {
                    case 0x22: out.append(0x5C); out.append(0x22)
                    case 0x5C: out.append(0x5C); out.append(0x5C)
                    case 0x0A: out.append(0x5C); out.append(0x6E)
                    case 0x0D: out.append(0x5C); out.append(0x72)
                    case 0x09: out.append(0x5C); out.append(0x74)
                    default:
                        let hex: StaticString = "0123456789abcdef"
                        hex.withUTF8Buffer { digits in
                            out.append(contentsOf: [0x5C, 0x75, 0x30, 0x30, digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
                        }
                    }
                }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
            }
            out.append(0x22)
        }
        raw(#"{"message":{"token":"#); string(push.token)
        raw(#","notification":{"title":"#); string(title)
        raw(#","body":"#); string(body(displayName: displayName, withinTime: push.withinTime))
        raw(#"},"data":{"type":"DOSE_TAKEN","patientId":"#); string(push.patientId)
        raw(#","date":"#); string(push.date)
        raw(#","slot":"#); string(push.slot)
        raw(#","recordingGroupId":"#); string(push.recordingGroupId ?? "")
        raw(#"},"apns":{"headers":{"apns-collapse-id":"#); string(collapseId(eventKey: push.eventKey))
        raw(#","apns-push-type":"alert","apns-priority":"10""#)
        if let expiration = push.expiration {
            raw(#","apns-expiration":""#)
            out.append(contentsOf: String(expiration).utf8)
            out.append(0x22)
        }
        raw(#"},"payload":{"aps":{"sound":"default","thread-id":"#); string("patient-\(push.patientId)")
        raw(#"}}},"fcm_options":{"analytics_label":"dose_taken"}}}"#)
        return out
    }
}
