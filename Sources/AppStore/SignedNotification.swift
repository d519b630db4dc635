import FoundationEssentials
import JSON

/// An App Store Server Notification V2 (`signedPayload`) after its signature and chain were checked.
/// The transaction inside is still unchecked: `signedTransactionInfo` goes through
/// `SignedTransactionVerifier.verify(_:expecting:)` against the entitlement row, exactly as a looked-up one.
public struct VerifiedNotification: Sendable, Equatable {
    /// `REFUND`, `REFUND_REVERSED`, ...
    public var notificationType: String
    public var subtype: String?
    public var notificationUUID: String?
    /// `Production` or `Sandbox`.
    public var environment: String
    public var bundleId: String
    /// The signed transaction inside (a JWS), verified separately.
    public var signedTransactionInfo: String
    public var signedDate: Date
}

extension SignedTransactionVerifier {
    /// Verifies a notification's `signedPayload` (same chain, OIDs and ES256 checks as a transaction) and that it is of
    /// `type`, for `bundleId`, from `environment`; throws the first `Refusal`.
    public func verifyNotification(_ signedPayload: String, type: String, bundleId: String,
                                   environment: String) throws(Refusal) -> VerifiedNotification {
        let (payload, signedDate) = try verifiedPayload(signedPayload)
        guard let notificationType = payload["notificationType"]?.stringValue, let data = payload["data"],
              let signedTransactionInfo = data["signedTransactionInfo"]?.stringValue,
              let dataEnvironment = data["environment"]?.stringValue, let dataBundle = data["bundleId"]?.stringValue else {
            throw .malformedNotification
        }
        guard notificationType == type else { throw .notificationTypeMismatch }
        guard !Self.untrustedEnvironments.contains(dataEnvironment) else { throw .untrustedEnvironment }
        guard dataBundle == bundleId else { throw .bundleMismatch }
        guard dataEnvironment == environment else { throw .environmentMismatch }
        return VerifiedNotification(notificationType: notificationType, subtype: payload["subtype"]?.stringValue,
                                    notificationUUID: payload["notificationUUID"]?.stringValue, environment: dataEnvironment,
                                    bundleId: dataBundle, signedTransactionInfo: signedTransactionInfo, signedDate: signedDate)
    }

    /// The `originalTransactionId` a signed transaction claims, read before any check, only to find its row.
    public static func claimedOriginalTransactionId(_ jws: String) -> String? {
        unverifiedPayload(jws).flatMap { string($0["originalTransactionId"]) }
    }
}
