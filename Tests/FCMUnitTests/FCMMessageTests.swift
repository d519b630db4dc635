import FCM
import Foundation
import JSON
import Push
import Testing

/// The request body stays within FCM's 4,096 bytes whatever the display name: a name that does not fit is
/// shortened by whole grapheme clusters and ends with `…`; nothing else is shortened; a short name is untouched.
@Suite("FCM message: size and the APNs headers")
struct FCMMessageTests {
    static func push(name: String, withinTime: Bool = true) -> DoseTakenPush {
        DoseTakenPush(token: "fcm-token-" + String(repeating: "x", count: 150), eventKey: "doseTaken:group-1", patientId: "p1",
                      displayName: name, date: "2026-02-11", slot: "morning", recordingGroupId: "group-1", withinTime: withinTime,
                      expiration: 1_770_850_000)
    }

    /// The display name as it went out: the notification body without its fixed suffix.
    static func sentName(_ push: DoseTakenPush) throws -> String {
        let json = try #require(try JSONSerialization.jsonObject(with: Data(FCMMessage.json(for: push))) as? [String: Any])
        let body = try #require(((json["message"] as? [String: Any])?["notification"] as? [String: String])?["body"])
        let suffix = push.withinTime ? "さんが時間内に薬を服用しました" : "さんが薬を服用しました"
        #expect(body.hasSuffix(suffix))
        return String(body.dropLast(suffix.count))
    }

    /// Bytes a name takes in the body: UTF-8, with `"` and `\\` escaped (the only escapes these names need).
    static func escapedBytes(_ name: String) -> Int { name.utf8.count + name.utf8.count { $0 == 0x22 || $0 == 0x5C } }

    /// Bytes of the body with an empty name: what a name may add is 4,096 minus this.
    static var fixedBytes: Int { FCMMessage.json(for: push(name: "")).count }

    @Test func ordinaryName_isUntouched() throws {
        let push = Self.push(name: "山田花子")
        #expect(try Self.sentName(push) == "山田花子")
        #expect(FCMMessage.json(for: push).count < 4096)
    }

    @Test func nameExactlyAtTheLimit_isUntouched_andOneByteMoreIsShortened() throws {
        let fits = String(repeating: "a", count: 4096 - Self.fixedBytes)
        #expect(FCMMessage.json(for: Self.push(name: fits)).count == 4096)
        #expect(try Self.sentName(Self.push(name: fits)) == fits)
        let over = fits + "b"
        let sent = try Self.sentName(Self.push(name: over))
        #expect(sent == String(repeating: "a", count: 4096 - Self.fixedBytes - 3) + "…")
        #expect(FCMMessage.json(for: Self.push(name: over)).count == 4096)
    }

    @Test(arguments: [
        ("ascii", String(repeating: "a", count: 5_000)),
        ("cjk", String(repeating: "患", count: 1_400)),
        ("family emoji (ZWJ sequence)", String(repeating: "👨‍👩‍👧‍👦", count: 300)),
        ("flag", String(repeating: "🇯🇵", count: 700)),
        ("combining marks", String(repeating: "e\u{301}\u{323}", count: 1_000)),
        ("hangul jamo", String(repeating: "\u{1100}\u{1161}\u{11A8}", count: 600)),
        ("escaped quotes", String(repeating: "\"\\", count: 1_500)),
    ])
    func longName_isCutBetweenWholeCharacters_andTheBodyFits(kind: String, name: String) throws {
        let push = Self.push(name: name)
        let bytes = FCMMessage.json(for: push)
        #expect(bytes.count <= 4096, "\(kind): \(bytes.count) bytes")
        let sent = try Self.sentName(push)
        #expect(sent.hasSuffix("…"))
        let kept = String(sent.dropLast())
        #expect(name.hasPrefix(kept))
        // Whole grapheme clusters only: the kept part is exactly the first N characters of the name.
        #expect(Array(kept) == Array(name.prefix(kept.count)), "\(kind) was cut inside a character")
        // As long as fits: one more character would not (`json` never returns more than 4,096 bytes, so count it).
        let longer = String(name.prefix(kept.count + 1)) + "…"
        #expect(Self.fixedBytes + Self.escapedBytes(longer) > 4096, "\(kind) was cut shorter than needed")
    }

    @Test func nothingButTheNameIsShortened() throws {
        let push = Self.push(name: String(repeating: "患", count: 3_000), withinTime: false)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(FCMMessage.json(for: push))) as? [String: Any])
        let message = try #require(json["message"] as? [String: Any])
        #expect(message["token"] as? String == push.token)
        #expect((message["notification"] as? [String: String])?["title"] == "服薬記録")
        #expect(message["data"] as? [String: String] == ["type": "DOSE_TAKEN", "patientId": "p1", "date": "2026-02-11",
                                                         "slot": "morning", "recordingGroupId": "group-1"])
    }

    /// The body byte for byte, against a reference encoding of SPEC §3's message, with every kind of byte a
    /// value can hold in every value: quotes, backslashes, the named control escapes, other control bytes (`\u00XX`),
    /// multi-byte text, and values that are empty or need no escape at all.
    @Test(arguments: [
        DoseTakenPush(token: "tok\"en\\1", eventKey: "doseTaken:g\n1", patientId: "p\u{01}\u{1F}\t", displayName: "山田\"花子\\\r",
                      date: "2026-02-11", slot: "morning", recordingGroupId: "g\u{7F}é", withinTime: true, expiration: 1_770_850_000),
        DoseTakenPush(token: "plain", eventKey: "doseTaken:" + String(repeating: "k", count: 80), patientId: "", displayName: "",
                      date: "", slot: "noon", recordingGroupId: nil, withinTime: false, expiration: nil),
    ])
    func body_isExactlyTheReferenceEncoding(push: DoseTakenPush) throws {
        // The reference: the JSON module's own string writer, written apart from the FCM body's.
        let quoted = JSONValue.quoted
        var expected = #"{"message":{"token":"# + quoted(push.token) + #","notification":{"title":"# + quoted(FCMMessage.title)
        expected += #","body":"# + quoted(FCMMessage.body(displayName: push.displayName, withinTime: push.withinTime))
        expected += #"},"data":{"type":"DOSE_TAKEN","patientId":"# + quoted(push.patientId) + #","date":"# + quoted(push.date)
        expected += #","slot":"# + quoted(push.slot) + #","recordingGroupId":"# + quoted(push.recordingGroupId ?? "")
        expected += #"},"apns":{"headers":{"apns-collapse-id":"# + quoted(FCMMessage.collapseId(eventKey: push.eventKey))
        expected += #","apns-push-type":"alert","apns-priority":"10""#
        if let expiration = push.expiration { expected += #","apns-expiration":"# + quoted(String(expiration)) }
        expected += #"},"payload":{"aps":{"sound":"default","thread-id":"# + quoted("patient-" + push.patientId)
        expected += #"}}},"fcm_options":{"analytics_label":"dose_taken"}}}"#
        let body = FCMMessage.json(for: push)
        #expect(String(decoding: body, as: UTF8.self) == expected)
        // And it is JSON that gives the values back.
        let json = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        let message = try #require(json["message"] as? [String: Any])
        #expect(message["token"] as? String == push.token)
        #expect((message["data"] as? [String: String])?["patientId"] == push.patientId)
    }

    @Test func apnsHeaders_alertPriorityAndExpiration() throws {
        let json = try #require(try JSONSerialization.jsonObject(with: Data(FCMMessage.json(for: Self.push(name: "n")))) as? [String: Any])
        let headers = try #require(((json["message"] as? [String: Any])?["apns"] as? [String: Any])?["headers"] as? [String: String])
        #expect(headers["apns-push-type"] == "alert")
        #expect(headers["apns-priority"] == "10")
        #expect(headers["apns-expiration"] == "1770850000")
    }

    /// Issue 54: Google and Apple see `apns-collapse-id`, and a key without a `recordingGroupId` is a patient and the time
    /// of a dose. The header is the key's SHA-256 in hex: 64 bytes, the same on every retry, the key nowhere in it.
    @Test func collapseId_isTheKeysSHA256_neverTheKey() throws {
        let key = "doseTaken:p1:2026-02-11:morning:08:00"
        let collapse = FCMMessage.collapseId(eventKey: key)
        #expect(collapse == "6fca9b11a2912bb6fe9a4f53f80759f6b26bf30b7778cc47ccd6b743ce0d0e68")
        #expect(collapse == FCMMessage.collapseId(eventKey: key))
        #expect(collapse != FCMMessage.collapseId(eventKey: "doseTaken:p1:2026-02-11:morning:08:01"))
        for long in ["doseTaken:" + String(repeating: "x", count: 300), "doseTaken:服薬" + String(repeating: "記録", count: 100)] {
            #expect(FCMMessage.collapseId(eventKey: long).utf8.count == 64)
        }
        var push = Self.push(name: "n")
        push.eventKey = key
        let body = String(decoding: FCMMessage.json(for: push), as: UTF8.self)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
        let headers = try #require(((json["message"] as? [String: Any])?["apns"] as? [String: Any])?["headers"] as? [String: String])
        #expect(headers["apns-collapse-id"] == collapse)
        #expect(!body.contains(key) && !body.contains("08:00"), "\(body)")
    }
}
