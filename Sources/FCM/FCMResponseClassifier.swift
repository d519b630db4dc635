import FoundationEssentials
import JSON
import Push
import TextSupport
import Timekeeping

/// Maps an FCM HTTP v1 response to an outcome, per docs/operations.md, "When FCM fails".
public enum FCMResponseClassifier {
    /// A classified response. `overloaded`: FCM or the project's quota cannot take more now (a 5xx, UNAVAILABLE, INTERNAL,
    /// the project's QUOTA_EXCEEDED): the send is retried and the sender pauses as a whole, at least `quotaPause` for the
    /// quota. `unauthenticated` asks the sender to refresh its token and retry once; `projectFault` is a fault of the
    /// project or the path to FCM, not of the device: nothing is disabled or failed, the send is retried and the sender
    /// pauses as a whole.
    public enum Result: Sendable, Equatable {
        case outcome(SendOutcome)
        case overloaded(reason: String, retryAfter: Duration?, minimumBackoff: Duration?, quota: Bool)
        case unauthenticated
        case projectFault(reason: String, retryAfter: Duration?)
    }

    /// FCM's message for an invalid registration token.
    static let invalidTokenMessage = "registration token"
    /// FCM's message (400 INVALID_ARGUMENT) for an iOS token APNs has retired (the app uninstalled): APNs answered 410
    /// Unregistered, which the ApnsError detail carries when present. firebase-admin surfaces it as
    /// `messaging/invalid-argument: APNs device token is disabled.`
    static let apnsTokenDisabledMessage = "APNs device token is disabled"

    static let fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
    static let badRequestType = "type.googleapis.com/google.rpc.BadRequest"
    static let quotaFailureType = "type.googleapis.com/google.rpc.QuotaFailure"
    static let apnsErrorType = "type.googleapis.com/google.firebase.fcm.v1.ApnsError"
    /// The retry reason of a 429 for one device's message rate (not the project's quota).
    public static let deviceQuotaReason = "QUOTA_EXCEEDED_DEVICE"
    /// The retry reason of a 429 for the project's quota.
    public static let projectQuotaReason = "QUOTA_EXCEEDED"

    /// The parts of Google's error JSON (`error.code`, `error.status`, `error.details[]`) that matter.
    public struct GoogleError: Sendable, Equatable {
        public var code: Int?
        public var status: String?
        public var message: String?
        /// `errorCode` of the FcmError detail.
        public var fcmErrorCode: String?
        /// `field` of each BadRequest field violation.
        public var badRequestFields: [String]?
        /// Each QuotaFailure violation's `subject`, `description` (and `quotaId`, `quotaMetric` when present), joined.
        public var quotaViolations: [String]?
        /// `statusCode` and `reason` of the ApnsError detail: what APNs answered FCM for an iOS token.
        public var apnsStatusCode: Int?
        public var apnsReason: String?

        /// True when the QuotaFailure detail says one device's message rate ran out, not the project's quota.
        public var isDeviceQuota: Bool {
            quotaViolations?.contains { $0.lowercased().contains("device") } ?? false
        }

        /// True when the error names the registration token: by message, or by a `message.token` field violation; or
        /// says APNs has retired the token (by message, or APNs' own 410 Unregistered in the ApnsError detail).
        public var namesRegistrationToken: Bool {
            (message?.contains(FCMResponseClassifier.invalidTokenMessage) ?? false)
                || (badRequestFields?.contains("message.token") ?? false)
                || (message?.contains(FCMResponseClassifier.apnsTokenDisabledMessage) ?? false)
                || apnsStatusCode == 410 || apnsReason == "Unregistered"
        }

        /// Parses the body; nil when it is not Google's error shape.
        public static func parse(_ body: [UInt8]) -> GoogleError? {
            guard let root = JSONValue.parse(bytes: body), let error = root["error"], error.objectValue != nil else { return nil }
            var parsed = GoogleError(code: error["code"]?.intValue, status: error["status"]?.stringValue,
                                     message: error["message"]?.stringValue)
            // A member of the wrong shape counts as absent, as a failed cast did (an array with one odd element: none).
            func objects(_ value: JSONValue?) -> [JSONValue] {
                guard let items = value?.arrayValue, items.allSatisfy({ $0.objectValue != nil }) else { return [] }
                return items
            }
            for detail in objects(error["details"]) {
                switch detail["@type"]?.stringValue {
                case fcmErrorType?:
                    parsed.fcmErrorCode = detail["errorCode"]?.stringValue
                case badRequestType?:
                    parsed.badRequestFields = objects(detail["fieldViolations"]).compactMap { $0["field"]?.stringValue }
                case apnsErrorType?:
                    parsed.apnsStatusCode = detail["statusCode"]?.intValue
                    parsed.apnsReason = detail["reason"]?.stringValue
                case quotaFailureType?:
                    parsed.quotaViolations = objects(detail["violations"]).map { violation in
                        ["subject", "description", "quotaId", "quotaMetric"].compactMap { violation[$0]?.stringValue }.joined(separator: " ")
                    }
                default:
                    continue
                }
            }
            return parsed
        }
    }

    /// Classifies one response; `now` resolves an HTTP-date Retry-After.
    /// A device is disabled only on evidence against its token, never on a fault of the project,
    /// the network or a proxy.
    public static func classify(status: Int, headers: [String: String], body: [UInt8], now: Date = Date()) -> Result {
        if status == 200 { return .outcome(.sent(messageName: JSONValue.parse(bytes: body)?["name"]?.stringValue ?? "")) }
        let error = GoogleError.parse(body)
        let code = error?.fcmErrorCode
        let retryAfter = headers["retry-after"].flatMap { parseRetryAfter($0, now: now) }

        // The HTTP status decides the class first: a 5xx or 429 is never a dead token, whatever the
        // body says (scripts/fuzz found a 500 whose body said NOT_FOUND being taken for UNREGISTERED).
        if status == 429 || (status < 500 && code == "QUOTA_EXCEEDED") {
            // One device over its message rate: only that delivery waits (Retry-After, else the usual backoff); the
            // project is fine, so no pause and no 60 s floor.
            if error?.isDeviceQuota == true {
                return .outcome(.retry(reason: deviceQuotaReason, after: retryAfter, minimumBackoff: nil))
            }
            return .overloaded(reason: projectQuotaReason, retryAfter: retryAfter, minimumBackoff: retryAfter == nil ? .seconds(60) : nil, quota: true)
        }
        if status >= 500 {
            let reason = status == 503 ? "UNAVAILABLE" : status == 500 ? "INTERNAL" : "HTTP \(status)"
            return .overloaded(reason: reason, retryAfter: retryAfter, minimumBackoff: nil, quota: false)
        }
        // Not Google's JSON error (an HTML 404 from a proxy, a wrong FCM_BASE_URL): says nothing about the device.
        guard let error else {
            return .projectFault(reason: "HTTP \(status) that is not an FCM answer (check FCM_BASE_URL and any proxy)",
                                 retryAfter: retryAfter)
        }
        if code == "UNREGISTERED" { return .outcome(.tokenInvalid(.unregistered)) }
        // The same for one device, but also what a deleted project or a rewritten path answers: FCMSender's brake names it.
        if code == nil && error.status == "NOT_FOUND" { return .outcome(.tokenInvalid(.notFound)) }
        // Every disabling answer is evidence against the token only when other devices answer healthy: FCMSender
        // judges it (DisableBrake).
        if code == "SENDER_ID_MISMATCH" { return .outcome(.tokenInvalid(.senderIdMismatch)) }
        if code == "THIRD_PARTY_AUTH_ERROR" { return .outcome(.permanentFailure(reason: "THIRD_PARTY_AUTH_ERROR")) }
        if code == "UNAVAILABLE" || code == "INTERNAL" { return .overloaded(reason: code!, retryAfter: retryAfter, minimumBackoff: nil, quota: false) }
        if status == 400 || code == "INVALID_ARGUMENT" {
            if error.namesRegistrationToken { return .outcome(.tokenInvalid(.invalidToken)) }
            // A payload bug (another field, or none named): the device is fine, the message is not.
            if let fields = error.badRequestFields, !fields.isEmpty {
                return .outcome(.permanentFailure(reason: "INVALID_ARGUMENT: bad field \(fields.joined(separator: ", ").prefix(120))"))
            }
            return .outcome(.permanentFailure(reason: "INVALID_ARGUMENT: \((error.message ?? "no field named").prefix(120))"))
        }
        if status == 401 { return .unauthenticated }
        if status == 403 {
            // Without SENDER_ID_MISMATCH a 403 is the project's: IAM role missing, the API disabled.
            return .projectFault(reason: error.status ?? "PERMISSION_DENIED", retryAfter: retryAfter)
        }
        if status == 404 { return .projectFault(reason: "HTTP 404 \(error.status ?? "")".trimmingWhitespace(), retryAfter: retryAfter) }
        return .outcome(.permanentFailure(reason: code ?? error.status ?? "HTTP \(status)"))
    }

    /// `Retry-After` as delta-seconds or an HTTP-date (RFC 9110 §10.2.3, IMF-fixdate
    /// `Sun, 06 Nov 1994 08:49:37 GMT`); a past date means now. Parsed by hand: Foundation's
    /// DateFormatter leaks on Linux (found by scripts/fuzz), and this runs during FCM outages.
    public static func parseRetryAfter(_ value: String, now: Date) -> Duration? {
        let trimmed = value.trimmingWhitespace()
        if let seconds = Int(trimmed), seconds >= 0 { return .seconds(seconds) }
        guard let date = TimestampReader.httpDate(trimmed) else { return nil }
        return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
    }
}
