-- Least-privilege role for `medication-worker run` and the operator commands (status, event, events, redrive,
-- resend, devices, check-config --online). Run as the database owner
-- AFTER `medication-worker migrate` (which runs as the owner, since it creates tables and triggers).
--   psql "$OWNER_URL" -v ON_ERROR_STOP=1 -f sql/roles.sql
-- Then set a password (ALTER ROLE medication_worker PASSWORD '...') or use certificate auth, and
-- point DATABASE_URL at this role.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'medication_worker') THEN
        CREATE ROLE medication_worker LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO medication_worker', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO medication_worker;

-- Read the patient's name for the push (the claim) and whether a patient exists (`events --patient`); nothing else
-- of the patient, and never written. The caregiver links are read whole (never written).
-- The REVOKEs narrow a role that an earlier roles.sql granted whole tables (a table REVOKE also drops its column grants;
-- the GRANTs after it put back exactly the columns).
REVOKE SELECT ON "Patient" FROM medication_worker;
GRANT SELECT (id, "displayName") ON "Patient" TO medication_worker;
GRANT SELECT ON "CaregiverPatientLink" TO medication_worker;
-- Read tokens and registrations (the fan-out, `event`, `events --caregiver`, `devices --owner`, the stale gauge);
-- write only what a disable (the completer) and `devices enable` change. A token, an owner or "lastSeenAt" is the
-- API's to write: UPDATE of any other column is refused.
GRANT SELECT ON "PushDevice" TO medication_worker;
REVOKE UPDATE ON "PushDevice" FROM medication_worker;
GRANT UPDATE ("isEnabled", "updatedAt") ON "PushDevice" TO medication_worker;
-- Insert deliveries, record outcomes, prune old ones (retention).
GRANT SELECT, INSERT, UPDATE, DELETE ON "PushDelivery" TO medication_worker;
-- Re-check entitlements: status, "lastCheckedAt", "revokedAt", "revocationReason", "updatedAt".
GRANT SELECT, UPDATE ON "CaregiverEntitlement" TO medication_worker;
-- The outbox: claim, complete, redrive, prune. The API's role needs INSERT only.
GRANT SELECT, UPDATE, DELETE ON "PushOutbox" TO medication_worker;
-- The daemon checks the schema version before it reports ready.
GRANT SELECT ON "_medication_worker_migrations" TO medication_worker;
-- One-instance-at-a-time loops (retention, status gauges, entitlement sweep, notification history) take and
-- renew a lease row, and the gauges' publisher writes its state beside it.
GRANT SELECT, INSERT, UPDATE ON "_medication_worker_leases" TO medication_worker;
-- The disabled-device ledger: a row per disable (the completer), "restoredAt" set by `devices enable`; never deleted.
GRANT SELECT, INSERT, UPDATE ON "PushDeviceDisabled" TO medication_worker;
-- The live instances: each `run` process registers, renews and on a clean stop deletes its row, and forgets rows of
-- instances gone for a day; `status` lists them.
GRANT SELECT, INSERT, UPDATE, DELETE ON "_medication_worker_instances" TO medication_worker;
-- The App Store notification-history poller's checkpoint per environment and notification type.
GRANT SELECT, INSERT, UPDATE ON "AppStoreNotificationCheckpoint" TO medication_worker;

-- For the web API's role (adjust the name): enqueue only.
-- GRANT INSERT ON "PushOutbox" TO api;
-- GRANT USAGE ON SEQUENCE "PushOutbox_id_seq" TO api;
