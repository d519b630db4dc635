import Postgres

/// Who receives a push, as SQL the fan-out and the operator commands share (docs/operations.md, "Who gets the push"):
/// device `d` receives patient P's pushes while it is enabled, its owner is a CAREGIVER whose link to P is ACTIVE, and
/// it speaks for its token. `refusal` is the rule; the fan-out reaches its candidates through `linkedDevices`, made
/// of the same checks, so that finding them stays index scans rather than a probe per device.
package enum Recipients {
    /// Why a device does not receive a patient's pushes: the first of the rule's checks it fails, in `refusal`'s order.
    package enum Refusal: String, Sendable, CaseIterable {
        /// The device row is gone (a LEFT JOIN from its delivery found none).
        case deviceDeleted = "device_deleted"
        /// `"isEnabled"` is false: FCM reported the token dead, or pushes were switched off on the phone.
        case deviceDisabled = "device_disabled"
        /// Not a caregiver's device, or the caregiver has no ACTIVE link to the patient.
        case linkNotActive = "link_not_active"
        /// Another registration of the token was seen more recently (the phone changed hands).
        case tokenSuperseded = "token_superseded"
    }

    /// The rule for device row `device` (NULL when deleted, as a LEFT JOIN leaves it) and patient `patient`: NULL when
    /// the device receives the patient's pushes, else its first refusal as `say` writes it (by default its code).
    /// `refusal(…) IS NULL` is "is a recipient". Per row: a probe of `"CaregiverPatientLink_patientId_idx"`, then one
    /// of `"PushDevice_token_lastSeenAt_idx"`. Its subqueries name their rows `l` and `n`: `device` is another alias.
    package static func refusal(device d: String = "d", patient: PostgresQuery,
                                say: (Refusal) -> PostgresQuery = { code($0) }) -> PostgresQuery {
        """
        CASE WHEN \(unescaped: d).id IS NULL THEN \(sql: say(.deviceDeleted))
             WHEN NOT \(sql: enabled(d)) THEN \(sql: say(.deviceDisabled))
             WHEN NOT (\(sql: caregivers(d)) AND EXISTS (
                 SELECT 1 FROM "CaregiverPatientLink" l WHERE \(sql: activeLink("l", patient: patient)) AND \(sql: owner(d, of: "l"))))
                 THEN \(sql: say(.linkNotActive))
             WHEN NOT \(sql: speaksForToken(d)) THEN \(sql: say(.tokenSuperseded))
        END
        """
    }

    /// The fan-out's candidates: after `FROM` a relation that has the patient (`patient`), JOINs to the patient's ACTIVE
    /// links `l` and their caregivers' enabled devices `d` (a row per link and device): the devices `refusal` passes up
    /// to its token check, found by index scans (`"CaregiverPatientLink_patientId_idx"`, then
    /// `"PushDevice_ownerType_ownerId_token_key"`) rather than a link probe per device.
    package static func linkedDevices(patient: PostgresQuery) -> PostgresQuery {
        """
        JOIN "CaregiverPatientLink" l ON \(sql: activeLink("l", patient: patient))
        JOIN "PushDevice" d ON \(sql: caregivers("d")) AND \(sql: owner("d", of: "l")) AND \(sql: enabled("d"))
        """
    }

    /// Whether device row `d` speaks for its token ("A token is one phone"): no other row of the token, enabled or not,
    /// was seen more recently (ties go to the greater id). One probe of `"PushDevice_token_lastSeenAt_idx"`.
    package static func speaksForToken(_ d: String = "d") -> PostgresQuery {
        """
        NOT EXISTS (SELECT 1 FROM "PushDevice" n WHERE n.token = \(unescaped: d).token AND (n."lastSeenAt", n.id) > (\(unescaped: d)."lastSeenAt", \(unescaped: d).id))
        """
    }

    /// A column of `refusal` codes read back: nil for NULL (a recipient).
    package static func refusal(_ cell: PostgresCell) throws(PostgresError) -> Refusal? {
        cell.isNull ? nil : try cell.decode(Refusal.self)
    }

    /// A refusal's code as an SQL string literal: what `refusal` yields unless told otherwise.
    package static func code(_ refusal: Refusal) -> PostgresQuery { literal(refusal.rawValue) }

    /// `text` as an SQL string literal (the program's own constants only, never a value).
    package static func literal(_ text: String) -> PostgresQuery { "\(unescaped: "'" + text.replacing("'", with: "''") + "'")" }

    /// Device row `d` is enabled.
    static func enabled(_ d: String) -> PostgresQuery { "\(unescaped: d).\"isEnabled\"" }

    /// Link row `l` is an ACTIVE link to `patient`.
    static func activeLink(_ l: String, patient: PostgresQuery) -> PostgresQuery {
        "\(unescaped: l).\"patientId\" = \(sql: patient) AND \(unescaped: l).status = \(literal: LinkStatus.active)"
    }

    /// Device row `d` is a caregiver's (the ownerType outside the link's subquery: a test of the row, not per link).
    static func caregivers(_ d: String) -> PostgresQuery { "\(unescaped: d).\"ownerType\" = \(literal: OwnerType.caregiver)" }

    /// Device row `d` belongs to the caregiver of link row `l`.
    static func owner(_ d: String, of l: String) -> PostgresQuery { "\(unescaped: d).\"ownerId\" = \(unescaped: l).\"caregiverId\"" }
}
