import Foundation
import HTTPServer

extension FCMEmulator {
    /// `POST /v1/projects/{p}/messages:send`: auth, FCM-like validation, then the answer the token's prefix asks for.
    func send(_ request: HTTPServerRequest, project: String) -> HTTPServerResponse {
        if let answer = projectFaultAnswer(project: project) { return answer }
        guard isAuthorized(request) else {
            count("unauthenticated")
            return Self.googleError(401, "UNAUTHENTICATED",
                                    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
                                    errorCode: nil)
        }
        if let answer = projectQuotaAnswer() { return answer }
        let message: (token: String, collapseId: String, validateOnly: Bool)
        switch validate(request) {
        case .refused(let answer): return answer
        case .message(let token, let collapseId, let validateOnly): message = (token, collapseId, validateOnly)
        }
        if let answer = transientAnswer(token: message.token) { return answer }
        switch currentProjectFault() {
        case .senderIdMismatch?:
            count("project_sender_id_mismatch")
            return Self.senderIdMismatch()
        case .notFound?:
            count("project_not_found")
            return Self.plainNotFound()
        default:
            break
        }
        if let answer = tokenAnswer(token: message.token, project: project) { return answer }
        if message.validateOnly {
            // `"validate_only": true`: checked like a send and answered with Google's fixed name, delivered to no one.
            count("validate_only")
            return .json(200, Self.serialize(["name": "projects/\(project)/messages/fake_message_id"]))
        }
        return accept(request, token: message.token, collapseId: message.collapseId, project: project)
    }

    /// What `validate` found: the message's token and collapse id, or the 400 FCM would answer.
    enum Validated {
        /// `validateOnly`: the request's `"validate_only": true` (a dry run FCM checks and does not deliver).
        case message(token: String, collapseId: String, validateOnly: Bool)
        case refused(HTTPServerResponse)
    }

    /// Google's answer to a send over the project's quota, when one is configured and this send exceeds it.
    private func projectQuotaAnswer() -> HTTPServerResponse? {
        guard let quota = configuration.projectQuota else { return nil }
        let now = Date()
        let allowed = state.withLock { s -> Bool in
            let burst = Double(quota.burst) + 1
            let earned = (s.quotaAllowance ?? burst) + quota.rate * max(0, now.timeIntervalSince(s.quotaUpdated))
            s.quotaUpdated = now
            s.quotaAllowance = min(burst, earned)
            guard s.quotaAllowance! >= 1 else { return false }
            s.quotaAllowance! -= 1
            return true
        }
        if allowed { return nil }
        count("project_quota_exceeded")
        return Self.googleError(429, "RESOURCE_EXHAUSTED",
                                "Quota exceeded for quota metric 'Send requests' and limit 'Send requests per minute' of service 'fcm.googleapis.com'.",
                                errorCode: "QUOTA_EXCEEDED")
    }

    /// The answer to every send while a project fault is set.
    private func projectFaultAnswer(project: String) -> HTTPServerResponse? {
        switch currentProjectFault() {
        case .htmlNotFound?:
            count("project_html_404")
            return HTTPServerResponse(status: 404, headers: ["Content-Type": "text/html; charset=UTF-8"],
                                      body: Array("<!DOCTYPE html><html><head><title>404 Not Found</title></head><body><h1>Not Found</h1></body></html>".utf8))
        case .permissionDenied?:
            count("project_permission_denied")
            return Self.googleError(403, "PERMISSION_DENIED",
                                    "Permission 'cloudmessaging.messages.create' denied on resource '//cloudmessaging.googleapis.com/projects/\(project)' (or it may not exist).",
                                    errorCode: nil)
        case .unavailable(let seconds)?:
            count("project_unavailable")
            return Self.googleError(503, "UNAVAILABLE", "The service is currently unavailable.", errorCode: "UNAVAILABLE",
                                    retryAfter: String(seconds))
        case .senderIdMismatch?, .notFound?, nil:
            // These need an authenticated, valid message first: `send` answers them.
            return nil
        }
    }

    /// The project fault set now: `setProjectFault`'s, else the plain 404 `Configuration.notFoundAfter` starts once that
    /// long has passed since the emulator started (a healthy start, then a deleted project).
    private func currentProjectFault() -> ProjectFault? {
        if let fault = state.withLock({ $0.projectFault }) { return fault }
        if let after = configuration.notFoundAfter, Date().timeIntervalSince(startedAt) >= after.asSeconds { return .notFound }
        return nil
    }

    /// Google's answer when the project (or the path) is unknown: 404 NOT_FOUND without an FcmError detail.
    static func plainNotFound() -> HTTPServerResponse {
        googleError(404, "NOT_FOUND", "Requested entity was not found.", errorCode: nil)
    }

    /// FCM's answer to a token registered with another sender (another Firebase project than the key's).
    static func senderIdMismatch() -> HTTPServerResponse {
        googleError(403, "PERMISSION_DENIED", "SenderId mismatch", errorCode: "SENDER_ID_MISMATCH")
    }

    /// FCM's validation of the body: at most 4,096 bytes, JSON, a token, string data values, APNs headers as FCM and
    /// APNs document them (string values, a short apns-collapse-id, apns-priority 5 or 10, a known apns-push-type,
    /// apns-expiration in UNIX seconds), and an analytics label FCM accepts.
    private func validate(_ request: HTTPServerRequest) -> Validated {
        if request.body.count > Self.maxMessageBytes {
            // FCM's answer to an oversized message names no field.
            count("oversized")
            return .refused(Self.googleError(400, "INVALID_ARGUMENT", "Request contains an invalid argument.", errorCode: "INVALID_ARGUMENT"))
        }
        guard let root = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
              let message = root["message"] as? [String: Any] else {
            count("bad_request")
            return .refused(Self.badRequest("message", "Invalid JSON payload received."))
        }
        guard let token = message["token"] as? String, !token.isEmpty else {
            count("bad_request")
            return .refused(Self.badRequest("message.token", "Recipient of the message is not set."))
        }
        if let data = message["data"] {
            guard let fields = data as? [String: Any] else {
                count("bad_request")
                return .refused(Self.badRequest("message.data", "Invalid value at 'message.data': expected a map of strings"))
            }
            for (key, value) in fields where !(value is String) {
                count("bad_request")
                return .refused(Self.badRequest("message.data[\(key)].value", "Invalid value at 'message.data[\(key)].value' (TYPE_STRING)"))
            }
        }
        if let headers = (message["apns"] as? [String: Any])?["headers"] as? [String: Any], let refusal = Self.apnsHeaderProblem(headers) {
            count("bad_request")
            return .refused(Self.badRequest("message.apns.headers", refusal))
        }
        if let options = message["fcm_options"] as? [String: Any], let label = options["analytics_label"] {
            guard let label = label as? String, Self.isValidAnalyticsLabel(label) else {
                count("bad_request")
                return .refused(Self.badRequest("message.fcm_options.analytics_label", "Invalid analytics_label"))
            }
        }

        let collapseId = ((message["apns"] as? [String: Any])?["headers"] as? [String: Any])?["apns-collapse-id"] as? String ?? ""
        return .message(token: token, collapseId: collapseId, validateOnly: root["validate_only"] as? Bool == true)
    }

    /// FCM refuses a message over 4,096 bytes.
    static let maxMessageBytes = 4096
    /// `apns-push-type` values APNs knows.
    static let apnsPushTypes: Set<String> = ["alert", "background", "location", "voip", "complication", "fileprovider", "mdm",
                                             "liveactivity", "pushtotalk"]

    /// What is wrong with the APNs headers, as FCM would refuse them; nil when nothing is.
    static func apnsHeaderProblem(_ headers: [String: Any]) -> String? {
        for (name, value) in headers where !(value is String) {
            return "Invalid value at 'message.apns.headers[\(name)]' (TYPE_STRING)"
        }
        let values = headers.compactMapValues { $0 as? String }
        if let collapse = values["apns-collapse-id"], collapse.utf8.count > 64 { return "apns-collapse-id must not exceed 64 bytes" }
        if let priority = values["apns-priority"], priority != "5", priority != "10" { return "BadPriority: apns-priority must be 5 or 10" }
        if let type = values["apns-push-type"], !apnsPushTypes.contains(type) { return "InvalidPushType: \(type)" }
        if values["apns-push-type"] == "background", values["apns-priority"] == "10" {
            return "BadPriority: a background push must have apns-priority 5"
        }
        if let expiration = values["apns-expiration"], expiration.isEmpty || !expiration.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            return "BadExpirationDate: apns-expiration must be a UNIX epoch date in seconds"
        }
        return nil
    }

    /// FCM's pattern for `fcm_options.analytics_label`: `^[a-zA-Z0-9-_.~%]{1,50}$`.
    static func isValidAnalyticsLabel(_ label: String) -> Bool {
        (1...50).contains(label.utf8.count) && label.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || "-_.~%".utf8.contains(byte)
        }
    }

    /// The unavailable window after start and scripted failures; counts retries that came early.
    private func transientAnswer(token: String) -> HTTPServerResponse? {
        let now = Date()
        state.withLock { s in
            if let notBefore = s.retryNotBefore[token], now < notBefore { s.counters.earlyRetries += 1 }
        }
        let window = configuration.unavailableFor
        if window > .zero, now.timeIntervalSince(startedAt) < Double(window.components.seconds) {
            let seconds = Int((configuration.unavailableRetryAfter ?? window).components.seconds)
            state.withLock { s in s.retryNotBefore[token] = now.addingTimeInterval(TimeInterval(seconds)) }
            count("unavailable_window")
            return Self.googleError(503, "UNAVAILABLE", "The service is currently unavailable.", errorCode: "UNAVAILABLE",
                                    retryAfter: String(seconds))
        }
        let scripted = state.withLock { s -> Int? in
            guard let entry = s.scriptedFailures[token], entry.count > 0 else { return nil }
            s.scriptedFailures[token] = (entry.count - 1, entry.status)
            return entry.status
        }
        if let status = scripted {
            count("scripted_\(status)")
            switch status {
            case 429: return Self.googleError(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", errorCode: "QUOTA_EXCEEDED", retryAfter: "1")
            case 500: return Self.googleError(500, "INTERNAL", "Internal error encountered.", errorCode: "INTERNAL")
            default: return Self.googleError(503, "UNAVAILABLE", "The service is currently unavailable.", errorCode: "UNAVAILABLE", retryAfter: "1")
            }
        }

        return nil
    }

    /// The answer a device token's prefix selects (after the latency a `slow{ms}-` token asks for).
    private func tokenAnswer(token: String, project: String) -> HTTPServerResponse? {
        // "slow{ms}-…": a device FCM answers late (each request has its own connection thread here).
        if token.hasPrefix("slow"), let dash = token.firstIndex(of: "-"),
           let milliseconds = Int(token[token.index(token.startIndex, offsetBy: 4)..<dash]) {
            usleep(useconds_t(min(milliseconds, 60_000)) * 1000)
        }
        if state.withLock({ $0.unregistered.contains(token) }) {
            return Self.googleError(404, "NOT_FOUND", "Requested entity was not found.", errorCode: "UNREGISTERED")
        }
        let answers: [(prefix: String, respond: () -> HTTPServerResponse)] = [
            ("unregistered-", { Self.googleError(404, "NOT_FOUND", "Requested entity was not found.", errorCode: "UNREGISTERED") }),
            ("mismatch-", { Self.senderIdMismatch() }),
            // Google's plain 404 for one token (no FcmError detail): taken as UNREGISTERED.
            ("notfound-", { Self.plainNotFound() }),
            // The invalid-token answer in both shapes FCM uses: named by the message, or by a field violation.
            ("invalid-", { Self.googleError(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token",
                                             errorCode: "INVALID_ARGUMENT") }),
            ("invalidtokenfield-", { Self.googleError(400, "INVALID_ARGUMENT", "Request contains an invalid argument.",
                                                       errorCode: "INVALID_ARGUMENT", violation: ("message.token", "Invalid registration token")) }),
            // An iOS token APNs has retired (410 Unregistered), as FCM answers it: 400 INVALID_ARGUMENT with the ApnsError detail.
            ("apnsdisabled-", { Self.googleError(400, "INVALID_ARGUMENT", "APNs device token is disabled.", errorCode: "INVALID_ARGUMENT",
                                                 apns: (410, "Unregistered")) }),
            // INVALID_ARGUMENT naming no field, and a payload violation on another field: the message is wrong, not the device.
            ("badarg-", { Self.googleError(400, "INVALID_ARGUMENT", "Request contains an invalid argument.", errorCode: "INVALID_ARGUMENT") }),
            ("payload-", { Self.googleError(400, "INVALID_ARGUMENT", "Request contains an invalid argument.", errorCode: "INVALID_ARGUMENT",
                                             violation: ("message.apns.payload", "Invalid APNs payload")) }),
            ("denied-", { Self.googleError(403, "PERMISSION_DENIED",
                                            "Permission 'cloudmessaging.messages.create' denied on resource '//cloudmessaging.googleapis.com/projects/\(project)' (or it may not exist).",
                                            errorCode: nil) }),
            ("thirdparty-", { Self.googleError(401, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service",
                                               errorCode: "THIRD_PARTY_AUTH_ERROR") }),
            ("quotanoretry-", { Self.googleError(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric.", errorCode: "QUOTA_EXCEEDED") }),
            ("quota-", { Self.googleError(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric.", errorCode: "QUOTA_EXCEEDED",
                                          retryAfter: "30") }),
            // The two QuotaFailure shapes: the project's per-minute quota, and one device's message rate.
            ("projectquota-", { Self.googleError(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric.", errorCode: "QUOTA_EXCEEDED",
                                                 quota: ("project", "Project message rate quota exceeded.")) }),
            ("devicequota-", { Self.googleError(429, "RESOURCE_EXHAUSTED", "Device message rate exceeded.", errorCode: "QUOTA_EXCEEDED",
                                                retryAfter: "20", quota: ("device", "Device message rate quota exceeded.")) }),
            ("unavailabledate-", { Self.googleError(503, "UNAVAILABLE", "The service is currently unavailable.", errorCode: "UNAVAILABLE",
                                                    retryAfter: Self.httpDate(Date().addingTimeInterval(45))) }),
            ("unavailable-", { Self.googleError(503, "UNAVAILABLE", "The service is currently unavailable.", errorCode: "UNAVAILABLE",
                                                retryAfter: "30") }),
            ("internal-", { Self.googleError(500, "INTERNAL", "Internal error encountered.", errorCode: "INTERNAL") }),
        ]
        for answer in answers where token.hasPrefix(answer.prefix) {
            count(String(answer.prefix.dropLast()))
            return answer.respond()
        }
        return nil
    }

    /// A message FCM accepts: counted (duplicates by token and collapse id), recorded, answered 200.
    private func accept(_ request: HTTPServerRequest, token: String, collapseId: String, project: String) -> HTTPServerResponse {
        state.withLock { s in
            if s.acceptedKeys.insert("\(token)|\(collapseId)").inserted {
                s.counters.distinctAccepted += 1
            } else {
                s.counters.duplicates += 1
            }
        }
        let id = UInt64.random(in: 1_000_000_000_000...9_999_999_999_999)
        if configuration.recordMessages {
            let item = Received(projectId: project, json: String(decoding: request.body, as: UTF8.self), token: token, receivedAt: Date())
            state.withLock { s in s.received.append(item) }
        }
        count("success")
        return .json(200, Self.serialize(["name": "projects/\(project)/messages/0:\(id)%emulated"]))
    }

    /// Google's error JSON (`error.code/message/status/details[]`), with an FcmError detail when given.
    static func googleError(_ code: Int, _ status: String, _ message: String, errorCode: String?, retryAfter: String? = nil,
                            violation: (field: String, description: String)? = nil,
                            quota: (subject: String, description: String)? = nil,
                            apns: (statusCode: Int, reason: String)? = nil) -> HTTPServerResponse {
        var error: [String: Any] = ["code": code, "message": message, "status": status]
        var details: [[String: Any]] = []
        if let errorCode { details.append(["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": errorCode]) }
        if let apns {
            details.append(["@type": "type.googleapis.com/google.firebase.fcm.v1.ApnsError", "statusCode": apns.statusCode, "reason": apns.reason])
        }
        if let quota {
            // Which quota ran out: the project's message rate, or one device's.
            details.append(["@type": "type.googleapis.com/google.rpc.QuotaFailure",
                            "violations": [["subject": quota.subject, "description": quota.description]]])
        }
        if let violation {
            details.append(["@type": "type.googleapis.com/google.rpc.BadRequest",
                            "fieldViolations": [["field": violation.field, "description": violation.description]]])
        }
        if !details.isEmpty { error["details"] = details }
        var headers = ["Content-Type": "application/json; charset=UTF-8"]
        if let retryAfter { headers["Retry-After"] = retryAfter }
        return HTTPServerResponse(status: code, headers: headers, body: Array(serialize(["error": error]).utf8))
    }

    /// 400 INVALID_ARGUMENT with a google.rpc.BadRequest detail naming the field (a payload bug).
    static func badRequest(_ field: String, _ description: String) -> HTTPServerResponse {
        let error: [String: Any] = [
            "code": 400, "message": description, "status": "INVALID_ARGUMENT",
            "details": [
                ["@type": "type.googleapis.com/google.rpc.BadRequest",
                 "fieldViolations": [["field": field, "description": description]]],
            ],
        ]
        return HTTPServerResponse(status: 400, headers: ["Content-Type": "application/json; charset=UTF-8"],
                                  body: Array(serialize(["error": error]).utf8))
    }

    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
