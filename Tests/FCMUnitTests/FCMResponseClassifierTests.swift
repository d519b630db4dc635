import FCM
import Foundation
import Push
import Testing

@Suite("FCM error table")
struct FCMResponseClassifierTests {
    static func body(_ code: Int, _ status: String, fcm: String? = nil, badRequest: String? = nil, message: String = "m") -> [UInt8] {
        var details: [String] = []
        if let fcm { details.append(#"{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#(fcm)"}"#) }
        if let badRequest {
            details.append(#"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"\#(badRequest)","description":"bad"}]}"#)
        }
        return Array(#"{"error":{"code":\#(code),"message":"\#(message)","status":"\#(status)","details":[\#(details.joined(separator: ","))]}}"#.utf8)
    }

    func classify(_ status: Int, _ body: [UInt8], headers: [String: String] = [:]) -> FCMResponseClassifier.Result {
        FCMResponseClassifier.classify(status: status, headers: headers, body: body, now: Date(timeIntervalSince1970: 1_700_000_000))
    }

    @Test func success_keepsFCMsMessageName() {
        #expect(classify(200, Array(#"{"name":"projects/p/messages/0:1"}"#.utf8)) == .outcome(.sent(messageName: "projects/p/messages/0:1")))
        #expect(classify(200, Array("{\n  \"name\": \"projects/p/messages/0:2\"\n}\n".utf8)) == .outcome(.sent(messageName: "projects/p/messages/0:2")))
        // Escapes or extra fields take the full parser, with the same answer.
        #expect(classify(200, Array(#"{"name":"projects\/p/messages/3","x":1}"#.utf8)) == .outcome(.sent(messageName: "projects/p/messages/3")))
    }

    static let invalidTokenMessage = "The registration token is not a valid FCM registration token"
    static let invalidArgumentMessage = "Request contains an invalid argument."

    /// Evidence against the token, and only that, disables a device.
    @Test func deadTokens_areTokenInvalid() {
        #expect(classify(404, Self.body(404, "NOT_FOUND", fcm: "UNREGISTERED")) == .outcome(.tokenInvalid(.unregistered)))
        // Google's plain 404 (no FcmError detail): UNREGISTERED for the device, named NOT_FOUND by the brake.
        #expect(classify(404, Self.body(404, "NOT_FOUND", message: "Requested entity was not found."))
                == .outcome(.tokenInvalid(.notFound)))
        #expect(classify(403, Self.body(403, "PERMISSION_DENIED", fcm: "SENDER_ID_MISMATCH")) == .outcome(.tokenInvalid(.senderIdMismatch)))
        // The invalid-token answer names the token by message, by a message.token violation, or both.
        #expect(classify(400, Self.body(400, "INVALID_ARGUMENT", fcm: "INVALID_ARGUMENT", message: Self.invalidTokenMessage))
                == .outcome(.tokenInvalid(.invalidToken)))
        #expect(classify(400, Self.body(400, "INVALID_ARGUMENT", fcm: "INVALID_ARGUMENT", badRequest: "message.token", message: Self.invalidArgumentMessage))
                == .outcome(.tokenInvalid(.invalidToken)))
        #expect(classify(400, Self.body(400, "INVALID_ARGUMENT", badRequest: "message.token", message: Self.invalidTokenMessage))
                == .outcome(.tokenInvalid(.invalidToken)))
    }

    /// INVALID_ARGUMENT naming another field, or none, is a payload bug: FAILED, the device kept.
    /// An iOS token APNs has retired (the app uninstalled), as FCM answers it: 400 INVALID_ARGUMENT "APNs device token is
    /// disabled." with APNs' 410 Unregistered in an ApnsError detail; firebase-admin shows only the message. Either is
    /// evidence against the token (before: a payload bug, FAILED and logged as an operator's error at every dose, the
    /// device never disabled). Another APNs answer in the detail, with another message, names nothing: a payload bug.
    @Test func apnsRetiredToken_isTokenInvalid() {
        let apns = #"{"@type":"type.googleapis.com/google.firebase.fcm.v1.ApnsError","statusCode":410,"reason":"Unregistered"}"#
        let fcm = #"{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"INVALID_ARGUMENT"}"#
        let full = Array(#"{"error":{"code":400,"message":"APNs device token is disabled.","status":"INVALID_ARGUMENT","details":[\#(fcm),\#(apns)]}}"#.utf8)
        #expect(classify(400, full) == .outcome(.tokenInvalid(.invalidToken)))
        #expect(classify(400, Self.body(400, "INVALID_ARGUMENT", message: "APNs device token is disabled.")) == .outcome(.tokenInvalid(.invalidToken)))
        let detailOnly = Array(#"{"error":{"code":400,"message":"\#(Self.invalidArgumentMessage)","status":"INVALID_ARGUMENT","details":[\#(fcm),\#(apns)]}}"#.utf8)
        #expect(classify(400, detailOnly) == .outcome(.tokenInvalid(.invalidToken)))
        let otherAPNs = #"{"@type":"type.googleapis.com/google.firebase.fcm.v1.ApnsError","statusCode":400,"reason":"PayloadTooLarge"}"#
        let payload = Array(#"{"error":{"code":400,"message":"\#(Self.invalidArgumentMessage)","status":"INVALID_ARGUMENT","details":[\#(fcm),\#(otherAPNs)]}}"#.utf8)
        #expect(classify(400, payload) == .outcome(.permanentFailure(reason: "INVALID_ARGUMENT: \(Self.invalidArgumentMessage)")))
    }

    @Test func invalidArgument_notNamingTheToken_isAPayloadBug() {
        let otherField = classify(400, Self.body(400, "INVALID_ARGUMENT", fcm: "INVALID_ARGUMENT", badRequest: "message.data[0].value",
                                                 message: Self.invalidArgumentMessage))
        guard case .outcome(.permanentFailure(let reason)) = otherField else {
            Issue.record("expected a permanent failure, got \(otherField)")
            return
        }
        #expect(reason.contains("message.data[0].value"))
        let nameless = classify(400, Self.body(400, "INVALID_ARGUMENT", fcm: "INVALID_ARGUMENT", message: Self.invalidArgumentMessage))
        guard case .outcome(.permanentFailure) = nameless else {
            Issue.record("expected a permanent failure, got \(nameless)")
            return
        }
    }

    /// Faults of the project or the path to FCM disable nothing and fail nothing.
    @Test func projectFaults_areNeitherDeadTokensNorFailures() {
        #expect(classify(403, Self.body(403, "PERMISSION_DENIED")) == .projectFault(reason: "PERMISSION_DENIED", retryAfter: nil))
        let html = Array("<!DOCTYPE html><html><body><h1>404 Not Found</h1></body></html>".utf8)
        guard case .projectFault = classify(404, html) else { Issue.record("HTML 404 taken for a device answer"); return }
        guard case .projectFault = classify(400, Array("bad request".utf8)) else { Issue.record("non-JSON 400 taken for a device answer"); return }
        guard case .projectFault = classify(404, Array(#"{"message":"no route"}"#.utf8)) else { Issue.record("foreign JSON taken for FCM's"); return }
    }

    @Test func operatorProblems_arePermanentFailures() {
        #expect(classify(401, Self.body(401, "UNAUTHENTICATED", fcm: "THIRD_PARTY_AUTH_ERROR")) == .outcome(.permanentFailure(reason: "THIRD_PARTY_AUTH_ERROR")))
    }

    @Test func unauthenticatedWithoutDetail_asksForATokenRefresh() {
        #expect(classify(401, Self.body(401, "UNAUTHENTICATED")) == .unauthenticated)
    }

    @Test func transientErrors_retryHonouringRetryAfter() {
        #expect(classify(503, Self.body(503, "UNAVAILABLE", fcm: "UNAVAILABLE"), headers: ["retry-after": "30"])
                == .overloaded(reason: "UNAVAILABLE", retryAfter: .seconds(30), minimumBackoff: nil, quota: false))
        #expect(classify(500, Self.body(500, "INTERNAL", fcm: "INTERNAL")) == .overloaded(reason: "INTERNAL", retryAfter: nil, minimumBackoff: nil, quota: false))
        #expect(classify(502, Array("<html>bad gateway</html>".utf8)) == .overloaded(reason: "HTTP 502", retryAfter: nil, minimumBackoff: nil, quota: false))
    }

    /// Found by scripts/fuzz: the HTTP status decides first; a 5xx never disables a device.
    @Test func serverError_withAMisleadingBody_isNeverADeadToken() {
        #expect(classify(500, Self.body(500, "NOT_FOUND")) == .overloaded(reason: "INTERNAL", retryAfter: nil, minimumBackoff: nil, quota: false))
        #expect(classify(503, Self.body(503, "NOT_FOUND", fcm: "UNREGISTERED")) == .overloaded(reason: "UNAVAILABLE", retryAfter: nil, minimumBackoff: nil, quota: false))
        #expect(classify(429, Self.body(429, "NOT_FOUND", fcm: "SENDER_ID_MISMATCH"))
                == .overloaded(reason: "QUOTA_EXCEEDED", retryAfter: nil, minimumBackoff: .seconds(60), quota: true))
    }

    @Test func quotaExceeded_retryAfterWhenGivenElseAtLeastSixtySeconds() {
        #expect(classify(429, Self.body(429, "RESOURCE_EXHAUSTED", fcm: "QUOTA_EXCEEDED"), headers: ["retry-after": "7"])
                == .overloaded(reason: "QUOTA_EXCEEDED", retryAfter: .seconds(7), minimumBackoff: nil, quota: true))
        #expect(classify(429, Self.body(429, "RESOURCE_EXHAUSTED", fcm: "QUOTA_EXCEEDED"))
                == .overloaded(reason: "QUOTA_EXCEEDED", retryAfter: nil, minimumBackoff: .seconds(60), quota: true))
    }

    /// 429 with a google.rpc.QuotaFailure detail: one device's message rate backs off that delivery alone (no 60 s
    /// floor, Retry-After honoured); the project's quota (or no detail) keeps the 60 s floor.
    @Test func quotaFailure_deviceRateIsTheDevicesAlone_projectQuotaKeepsTheFloor() {
        func quota(_ subject: String) -> [UInt8] {
            Array(#"{"error":{"code":429,"message":"m","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"QUOTA_EXCEEDED"},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"\#(subject)","description":"quota exceeded"}]}]}}"#.utf8)
        }
        #expect(classify(429, quota("device")) == .outcome(.retry(reason: "QUOTA_EXCEEDED_DEVICE", after: nil, minimumBackoff: nil)))
        #expect(classify(429, quota("device"), headers: ["retry-after": "12"])
                == .outcome(.retry(reason: "QUOTA_EXCEEDED_DEVICE", after: .seconds(12), minimumBackoff: nil)))
        #expect(classify(429, quota("project")) == .overloaded(reason: "QUOTA_EXCEEDED", retryAfter: nil, minimumBackoff: .seconds(60), quota: true))
        #expect(classify(429, Self.body(429, "RESOURCE_EXHAUSTED", fcm: "QUOTA_EXCEEDED"))
                == .overloaded(reason: "QUOTA_EXCEEDED", retryAfter: nil, minimumBackoff: .seconds(60), quota: true))
    }

    @Test func retryAfter_parsesSecondsAndHTTPDate() {
        let now = Date(timeIntervalSince1970: 1_445_412_480)  // Wed, 21 Oct 2015 07:28:00 GMT
        #expect(FCMResponseClassifier.parseRetryAfter("120", now: now) == .seconds(120))
        #expect(FCMResponseClassifier.parseRetryAfter("Wed, 21 Oct 2015 07:29:30 GMT", now: now) == .seconds(90))
        #expect(FCMResponseClassifier.parseRetryAfter("Wed, 21 Oct 2015 07:00:00 GMT", now: now) == .zero)
        #expect(FCMResponseClassifier.parseRetryAfter("soon", now: now) == nil)
    }

    @Test func message_matchesTheSpecExactly() throws {
        let push = DoseTakenPush(token: "tok", eventKey: "doseTaken:g1", patientId: "p1", displayName: "山田花子", date: "2026-02-11",
                                 slot: "morning", recordingGroupId: nil, withinTime: true, expiration: 1_770_850_000)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(FCMMessage.json(for: push))) as? [String: Any])
        let message = try #require(json["message"] as? [String: Any])
        #expect(message["token"] as? String == "tok")
        #expect(message["notification"] as? [String: String] == ["title": "服薬記録", "body": "山田花子さんが時間内に薬を服用しました"])
        #expect(message["data"] as? [String: String] == ["type": "DOSE_TAKEN", "patientId": "p1", "date": "2026-02-11",
                                                         "slot": "morning", "recordingGroupId": ""])
        let apns = try #require(message["apns"] as? [String: Any])
        #expect(apns["headers"] as? [String: String] == ["apns-collapse-id": "8a08d40e4d98c3a2485ee81c4bef27ee7ffb14476f00781ee3af50aaea700bef", "apns-push-type": "alert",
                                                         "apns-priority": "10", "apns-expiration": "1770850000"])
        #expect(message["fcm_options"] as? [String: String] == ["analytics_label": "dose_taken"])
        #expect(Set(message.keys) == ["token", "notification", "data", "apns", "fcm_options"])
        #expect((apns["payload"] as? [String: Any])?["aps"] as? [String: String] == ["sound": "default", "thread-id": "patient-p1"])
        #expect(FCMMessage.body(displayName: "太郎", withinTime: false) == "太郎さんが薬を服用しました")
        let long = FCMMessage.collapseId(eventKey: "doseTaken:" + String(repeating: "x", count: 100))
        #expect(long.utf8.count == 64)
        #expect(long == FCMMessage.collapseId(eventKey: "doseTaken:" + String(repeating: "x", count: 100)))
    }

    @Test func message_escapesEveryValueItCarries() throws {
        let awkward = "a\"b\\c\nd\re\tf\u{01}g/ü🙂"
        let push = DoseTakenPush(token: awkward, eventKey: "doseTaken:\(awkward)", patientId: awkward, displayName: awkward,
                                 date: "2026-02-11", slot: "morning", recordingGroupId: awkward, withinTime: false)
        let bytes = FCMMessage.json(for: push)
        #expect(String(decoding: bytes, as: UTF8.self).contains(#"a\"b\\c\nd\re\tf\u0001g/ü🙂"#))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        let message = try #require(json["message"] as? [String: Any])
        #expect(message["token"] as? String == awkward)
        #expect((message["data"] as? [String: String])?["recordingGroupId"] == awkward)
        #expect((message["notification"] as? [String: String])?["body"] == "\(awkward)さんが薬を服用しました")
    }

    /// A 200 is sent whatever its body; the name is FCM's when the body is JSON with a string `name`, escapes decoded.
    @Test func successName_isReadFromAnyJSONShape_elseEmpty() {
        #expect(classify(200, Array("{\n  \"name\" :\t\"projects/p/messages/2\"\n}".utf8)) == .outcome(.sent(messageName: "projects/p/messages/2")))
        #expect(classify(200, Array(#"{"name":"a\"b\u00e9"}"#.utf8)) == .outcome(.sent(messageName: "a\"bé")))
        #expect(classify(200, Array(#"{"other":1,"name":"x"}"#.utf8)) == .outcome(.sent(messageName: "x")))
        #expect(classify(200, Array(#"{"nam"#.utf8)) == .outcome(.sent(messageName: "")))
        #expect(classify(200, Array(#"{"name":3}"#.utf8)) == .outcome(.sent(messageName: "")))
        #expect(classify(200, []) == .outcome(.sent(messageName: "")))
    }

    @Test func serviceAccount_malformedFileNamesTheField() {
        let error = #expect(throws: FCMError.self) {
            _ = try ServiceAccount.parse(Data(#"{"type":"service_account","project_id":"p","token_uri":"https://x/token"}"#.utf8), source: "/etc/sa.json")
        }
        #expect(error?.message.contains("/etc/sa.json") == true)
        #expect(error?.message.contains("client_email") == true)
    }

    /// Issue 54: the loader reads at most 64 KiB (Google's key file is about 2.3 KB); a larger file is refused unread.
    @Test func serviceAccount_largerThan64KiB_isRefusedNamingTheCap() throws {
        let path = NSTemporaryDirectory() + "mw-sa-\(UUID().uuidString).json"
        try (#"{"type":"service_account"}"# + String(repeating: " ", count: 64 * 1024)).write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let error = #expect(throws: FCMError.self) { _ = try ServiceAccount.load(path: path) }
        #expect(error?.message == "\(path) is larger than 64 KiB (a Google service account key is about 2.3 KB): not read")
    }
}
