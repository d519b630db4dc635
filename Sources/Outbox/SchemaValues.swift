import Postgres

// The text columns of the API's tables the worker reads with a closed set of values. Each enum is the one Swift type
// of its column and reaches SQL only as `\(literal: …)` (a literal, so partial indexes still match).

extension OutboxStatus: PostgresLiteral {}
extension DeliveryStatus: PostgresLiteral {}

/// `"CaregiverPatientLink".status`: a caregiver receives a patient's pushes only through an ACTIVE link.
public enum LinkStatus: String, Sendable, CaseIterable, PostgresLiteral {
    case active = "ACTIVE"
    /// The caregiver or the patient ended the link.
    case revoked = "REVOKED"
}

/// `"PushDevice"."ownerType"`: only a caregiver's devices receive dose pushes.
public enum OwnerType: String, Sendable, CaseIterable, PostgresLiteral {
    case caregiver = "CAREGIVER"
    case patient = "PATIENT"
}
