import Crypto
import FoundationEssentials
import Push

/// Builds the FCM HTTP v1 request body for one DOSE_TAKEN push (docs/operations.md, "The push as the phone sees it").
public enum FCMMessage {
    public static let title = "服薬記録"

    /// The notification body: `{name}さんが薬を服用しました`, or the "within time" variant.
    public static func body(displayName: String, withinTime: Bool) -> String {
        withinTime ? "\(displayName)さんが時間内に薬を服用しました" : "\(displayName)さんが薬を服用しました"
    }

    /// `apns-collapse-id`: SHA-256 of the eventKey in lower-case hex (64 bytes, APNs' limit), never the key itself: the
    /// key can name a patient and the time of a dose, and Google and Apple see this header. The same on every retry.
    public static func collapseId(eventKey: String) -> String {
        Digest.hex(Digest.sha256(Array(eventKey.utf8)))
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
        let body = body(displayName: displayName, withinTime: push.withinTime)
        let collapse = collapseId(eventKey: push.eventKey)
        let expiration = push.expiration.map { String($0) }
        let recordingGroupId = push.recordingGroupId ?? ""
        // Written in one pass into scratch space sized for the worst case (every byte of every value escaped as
        // `\u00XX`), then copied once into an array of the exact size (sends in flight hold it): no growth, no
        // per-piece bookkeeping of an appended array.
        let values = push.token.utf8.count + title.utf8.count + body.utf8.count + 2 * push.patientId.utf8.count + push.date.utf8.count
            + push.slot.utf8.count + recordingGroupId.utf8.count + collapse.utf8.count
        let bound = templateBytes + 6 * (values + (expiration?.utf8.count ?? 0))
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: bound) { buffer in
            var out = JSONWriter(base: buffer.baseAddress!)
            out.raw(#"{"message":{"token":"#); out.string(push.token)
            out.raw(#","notification":{"title":"#); out.string(title)
            out.raw(#","body":"#); out.string(body)
            out.raw(#"},"data":{"type":"DOSE_TAKEN","patientId":"#); out.string(push.patientId)
            out.raw(#","date":"#); out.string(push.date)
            out.raw(#","slot":"#); out.string(push.slot)
            out.raw(#","recordingGroupId":"#); out.string(recordingGroupId)
            out.raw(#"},"apns":{"headers":{"apns-collapse-id":"#); out.string(collapse)
            out.raw(#","apns-push-type":"alert","apns-priority":"10""#)
            if let expiration { out.raw(#","apns-expiration":"#); out.string(expiration) }
            // `"patient-{id}"`: the prefix needs no escape, so it goes in raw and the id is escaped in place.
            out.raw(#"},"payload":{"aps":{"sound":"default","thread-id":"patient-"#); out.string(push.patientId, opened: true)
            out.raw(#"}}},"fcm_options":{"analytics_label":"dose_taken"}}}"#)
            precondition(out.offset <= bound, "FCM message overran its bound")
            return Array(UnsafeBufferPointer(rebasing: buffer[..<out.offset]))
        }
    }

    /// More than the template's own bytes: 349 of fixed text and the quotes of its ten strings, 20.
    private static let templateBytes = 520

    /// Writes JSON pieces at `base` (sized by the caller): fixed text as is, strings quoted and escaped.
    private struct JSONWriter {
        let base: UnsafeMutablePointer<UInt8>
        var offset = 0

        mutating func raw(_ text: StaticString) {
            (base + offset).update(from: text.utf8Start, count: text.utf8CodeUnitCount)
            offset += text.utf8CodeUnitCount
        }

        mutating func byte(_ value: UInt8) {
            base[offset] = value
            offset += 1
        }

        /// `"value"`, escaped; `opened`: the opening quote (and a raw prefix) is already written.
        mutating func string(_ value: String, opened: Bool = false) {
            if !opened { byte(0x22) }
            var value = value
            value.withUTF8 { bytes in
                // Runs that need no escape (nearly every value) are copied whole.
                var runStart = 0
                for index in bytes.indices {
                    let byte = bytes[index]
                    guard byte == 0x22 || byte == 0x5C || byte < 0x20 else { continue }
                    copy(bytes, from: runStart, to: index)
                    runStart = index + 1
                    self.byte(0x5C)
                    switch byte {
                    case 0x22: self.byte(0x22)
                    case 0x5C: self.byte(0x5C)
                    case 0x0A: self.byte(0x6E)
                    case 0x0D: self.byte(0x72)
                    case 0x09: self.byte(0x74)
                    default:
                        let hex: StaticString = "0123456789abcdef"
                        self.byte(0x75); self.byte(0x30); self.byte(0x30)
                        self.byte(hex.utf8Start[Int(byte >> 4)]); self.byte(hex.utf8Start[Int(byte & 0x0F)])
                    }
                }
                copy(bytes, from: runStart, to: bytes.count)
            }
            byte(0x22)
        }

        private mutating func copy(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int) {
            guard end > start, let source = bytes.baseAddress else { return }
            (base + offset).update(from: source + start, count: end - start)
            offset += end - start
        }
    }
}
