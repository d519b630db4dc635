import Postgres

/// One versioned, additive schema change. Migrations add, never drop.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    /// Statements run in order inside one transaction (PQexecParams runs one statement at a time),
    /// with a short `lock_timeout`: DDL that would queue behind the API's transactions (and make
    /// the API's next statements queue behind it) gives up and is retried instead.
    public let statements: [PostgresQuery]
    /// Index builds on tables the API writes, run after `statements`, each on its own outside a
    /// transaction with `CREATE INDEX CONCURRENTLY` so the API's inserts never wait for them.
    public let concurrentIndexes: [ConcurrentIndex]

    public init(version: Int, name: String, statements: [PostgresQuery], concurrentIndexes: [ConcurrentIndex] = []) {
        self.version = version
        self.name = name
        self.statements = statements
        self.concurrentIndexes = concurrentIndexes
    }
}

/// An index built with `CREATE INDEX CONCURRENTLY IF NOT EXISTS`.
public struct ConcurrentIndex: Sendable {
    /// The index's name (unquoted).
    public let name: String
    /// What follows `ON`: the table and the index definition, e.g. `"PushDelivery" ("createdAt")`.
    public let definition: PostgresQuery

    public init(_ name: String, on definition: PostgresQuery) {
        self.name = name
        self.definition = definition
    }

    var createSQL: PostgresQuery {
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS \(unescaped: PostgresConnection.quoteIdentifier(name)) ON \(sql: definition)"
    }
}

/// The worker's migrations, in order. Append only: never edit a migration that has shipped in a release (two were
/// changed before 0.2.0's: version 4's index built concurrently, version 9 adding instead of renaming).
public enum Migrations {
    /// Tables the web API owns (docs/database.md); `migrate` refuses to run without them.
    public static let requiredAPITables = ["Patient", "CaregiverPatientLink", "PushDevice", "PushDelivery", "CaregiverEntitlement"]

    /// The worker's own tables, which migrations create and later ones alter (the bookkeeping and lease tables aside).
    public static let workerTables = ["PushOutbox", "AppStoreNotificationCheckpoint", "PushDeviceDisabled", "_medication_worker_instances"]

    /// The NOTIFY channel the statement-level trigger signals.
    public static let notifyChannel = "push_outbox"

    public static let all: [Migration] = [
        Migration(version: 1, name: "push outbox, delivery state, entitlement check columns", statements: [
            """
            CREATE TABLE IF NOT EXISTS "PushOutbox" (
                id bigserial PRIMARY KEY,
                "eventType" text NOT NULL,
                "patientId" text NOT NULL,
                payload jsonb NOT NULL,
                "createdAt" timestamptz NOT NULL DEFAULT now(),
                status text NOT NULL DEFAULT 'PENDING'
                    CONSTRAINT "PushOutbox_status_check" CHECK (status IN ('PENDING', 'DONE', 'DEAD', 'EXPIRED')),
                attempts integer NOT NULL DEFAULT 0,
                "availableAt" timestamptz NOT NULL DEFAULT now(),
                "leasedBy" text,
                "leaseToken" uuid,
                "leaseExpiresAt" timestamptz,
                "processedAt" timestamptz,
                "lastError" text
            )
            """,
            // The claim reads only due PENDING rows: a partial index keeps it independent of history.
            """
            CREATE INDEX IF NOT EXISTS "PushOutbox_pending_due_idx"
                ON "PushOutbox" ("availableAt", id) WHERE status = 'PENDING'
            """,
            """
            CREATE OR REPLACE FUNCTION medication_worker_notify_push_outbox() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('push_outbox', '');
                RETURN NULL;
            END
            $$
            """,
            """
            DROP TRIGGER IF EXISTS "PushOutbox_notify" ON "PushOutbox"
            """,
            """
            CREATE TRIGGER "PushOutbox_notify" AFTER INSERT ON "PushOutbox"
                FOR EACH STATEMENT EXECUTE FUNCTION medication_worker_notify_push_outbox()
            """,
            // Rows the API wrote before the worker existed were sent inline: they count as SENT.
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS status text NOT NULL DEFAULT 'SENT'
            """,
            """
            ALTER TABLE "PushDelivery" ALTER COLUMN status SET DEFAULT 'PENDING'
            """,
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0
            """,
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS "sentAt" timestamptz
            """,
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS "lastError" text
            """,
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS "fcmMessageId" text
            """,
            // A delivery is leased while its send is in flight, so two workers holding events with
            // the same eventKey never send it twice, and a crashed worker's claim expires.
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS "leaseToken" uuid
            """,
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS "leaseExpiresAt" timestamptz
            """,
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "lastCheckedAt" timestamptz
            """,
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "revokedAt" timestamptz
            """,
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "revocationReason" text
            """,
        ]),
            Migration(version: 2, name: "retention: finished-row and delivery-age indexes, event key, autovacuum", statements: [
            // The event's key, written with its deliveries, so pruning can spare deliveries of PENDING events.
            """
            ALTER TABLE "PushOutbox" ADD COLUMN IF NOT EXISTS "eventKey" text
            """,
            // A queue table churns: vacuum after ~1% dead rows rather than the default 20%, so the
            // claim's index scan never wades through dead tuples.
            """
            ALTER TABLE "PushOutbox" SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
                autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05)
            """,
            """
            ALTER TABLE "PushDelivery" SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
                autovacuum_analyze_scale_factor = 0.02)
            """,
        ], concurrentIndexes: [
            ConcurrentIndex("PushOutbox_finished_idx", on: #""PushOutbox" ("processedAt") WHERE status IN ('DONE', 'EXPIRED')"#),
            ConcurrentIndex("PushOutbox_pending_key_idx", on: #""PushOutbox" ("eventKey") WHERE status = 'PENDING'"#),
            ConcurrentIndex("PushDelivery_createdAt_idx", on: #""PushDelivery" ("createdAt")"#),
        ]),
        // The status gauges count DEAD and EXPIRED rows through these small partial indexes and estimate
        // DONE from the finished index's statistics: their cost does not grow with what retention keeps.
        Migration(version: 3, name: "status gauges: partial indexes on DEAD and EXPIRED events", statements: [], concurrentIndexes: [
            ConcurrentIndex("PushOutbox_dead_idx", on: #""PushOutbox" (id) WHERE status = 'DEAD'"#),
            ConcurrentIndex("PushOutbox_expired_idx", on: #""PushOutbox" (id) WHERE status = 'EXPIRED'"#),
        ]),
        Migration(version: 4, name: "entitlement scheduling: next check, backoff, notification history checkpoint", statements: [
            // When the row is next due. NULL: never scheduled (a row the API just inserted): due at once, first.
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "nextCheckAt" timestamptz
            """,
            // Consecutive failed lookups (drives the row's own backoff) and the last failure's reason.
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "checkFailures" integer NOT NULL DEFAULT 0
            """,
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "lastCheckError" text
            """,
            // Notifications are matched by the purchase's original transaction id (already UNIQUE in the API's schema).
            """
            CREATE TABLE IF NOT EXISTS "AppStoreNotificationCheckpoint" (
                environment text NOT NULL,
                "notificationType" text NOT NULL,
                "startDate" timestamptz NOT NULL,
                "endDate" timestamptz,
                "paginationToken" text,
                "updatedAt" timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (environment, "notificationType")
            )
            """,
        ], concurrentIndexes: [
            // The sweep's claim: per environment, the rows due soonest, as an index range scan. Built CONCURRENTLY like
            // every index on the API's tables (its first text built it inside the transaction that added the columns,
            // holding the API's reads and writes of "CaregiverEntitlement" for the whole build; the definition is the
            // same, so a database that has it keeps it).
            ConcurrentIndex("CaregiverEntitlement_recheck_due_idx", on: #""CaregiverEntitlement" (environment, (COALESCE("nextCheckAt", '-infinity'::timestamptz)), id) WHERE status = 'ACTIVE' OR (status = 'REVOKED' AND "revokedAt" IS NOT NULL)"#),
        ]),
        // Room on each PushDelivery page for the row's next version: the completion's UPDATE (status, "sentAt",
        // "fcmMessageId", lease) touches no indexed column, so with room on the page it is a HOT update and writes
        // no index entry (docs/database.md: HOT share and WAL per outcome). Storage parameter only:
        // SHARE UPDATE EXCLUSIVE, no rewrite; new pages are filled to half.
        Migration(version: 5, name: "delivery pages keep room for the outcome's HOT update (fillfactor 50)", statements: [
            """
            ALTER TABLE "PushDelivery" SET (fillfactor = 50)
            """,
        ]),
        // The evidence behind every disabled device and the undo list when a disable was wrong (docs/database.md): one
        // row per disable, written in the same statement as the disable itself. The live instances: each `run` process
        // keeps its row's heartbeat; `status` lists them and they share the FCM project's send budget.
        Migration(version: 6, name: "disabled-device ledger, live instances", statements: [
            """
            CREATE TABLE IF NOT EXISTS "PushDeviceDisabled" (
                id text PRIMARY KEY DEFAULT gen_random_uuid()::text,
                "pushDeviceId" text NOT NULL,
                reason text NOT NULL,
                "eventKey" text,
                "lastError" text,
                "disabledAt" timestamptz NOT NULL DEFAULT now(),
                "restoredAt" timestamptz
            )
            """,
            """
            CREATE INDEX IF NOT EXISTS "PushDeviceDisabled_disabledAt_idx" ON "PushDeviceDisabled" ("disabledAt")
            """,
            """
            CREATE INDEX IF NOT EXISTS "PushDeviceDisabled_pushDeviceId_idx" ON "PushDeviceDisabled" ("pushDeviceId")
            """,
            """
            CREATE TABLE IF NOT EXISTS "_medication_worker_instances" (
                id uuid PRIMARY KEY,
                host text NOT NULL,
                pid integer NOT NULL,
                version text NOT NULL,
                "startedAt" timestamptz NOT NULL DEFAULT now(),
                "heartbeatAt" timestamptz NOT NULL DEFAULT now()
            )
            """,
        ]),
        // Who gets the push (docs/operations.md, "Who gets the push"). A delivery names its event's patient: two
        // patients' events can share a key (a `recordingGroupId` reused), and grouping, reclaim, settlement and resend
        // are per (patient, key). A row the API's inline sender inserts during the cutover names only the seed's
        // columns: it is a push already sent, so the default status is SENT (the worker always writes PENDING itself).
        // A token's rows are found by token, newest registration last, so the fan-out can send only to the row that
        // speaks for the phone.
        Migration(version: 7, name: "deliveries name their patient; inline-sender rows are SENT; a token's newest registration", statements: [
            """
            ALTER TABLE "PushDelivery" ADD COLUMN IF NOT EXISTS "patientId" text
            """,
            """
            ALTER TABLE "PushDelivery" ALTER COLUMN status SET DEFAULT 'SENT'
            """,
        ], concurrentIndexes: [
            ConcurrentIndex("PushDevice_token_lastSeenAt_idx", on: #""PushDevice" (token, "lastSeenAt", id)"#),
        ]),
        // The fleet's disable cap: the disable statement counts the ledger's recent rows, and a disable the sender's
        // brake vouched for (one dead token among healthy answers) is held only by the short window; rows written
        // before this migration count as not vouched.
        Migration(version: 8, name: "disable ledger: vouched disables, for the fleet's disable cap", statements: [
            """
            ALTER TABLE "PushDeviceDisabled" ADD COLUMN IF NOT EXISTS vouched boolean NOT NULL DEFAULT false
            """,
        ]),
        // A disable needs a witness (round 6): the ledger says whether FCM accepted a known-good token after the send
        // began. Only a new deployment's disables are unwitnessed, and the fleet counts those (a partial index keeps the
        // count off the ledger's history). Every row before this migration had a healthy answer beside it, so it counts as
        // witnessed (the default), and so do the rows a daemon of the version before writes during a rolling upgrade: it
        // still writes `vouched`, which stays (migrations add, never drop; this daemon writes `witnessed` and leaves
        // `vouched` to its default). Changed before 0.2.0 was released: its first text renamed `vouched`, which failed
        // the older daemons' disables during the upgrade; a database that applied that text has `witnessed` and no
        // `vouched`, which this daemon reads and writes the same.
        Migration(version: 9, name: "disable ledger: witnessed disables (a disable needs a witness)", statements: [
            """
            ALTER TABLE "PushDeviceDisabled" ADD COLUMN IF NOT EXISTS witnessed boolean NOT NULL DEFAULT true
            """,
        ], concurrentIndexes: [
            ConcurrentIndex("PushDeviceDisabled_unwitnessed_idx",
                            on: #""PushDeviceDisabled" ("disabledAt") WHERE NOT witnessed AND "restoredAt" IS NULL"#),
        ]),
        // Apple's 2025 revocation fields (App Store Server API 1.19): what kind of revocation revoked the row
        // (REFUND_FULL, REFUND_PRORATED, FAMILY_REVOKE) and, for a refund, the share refunded in milliunits (40% = 40000).
        Migration(version: 10, name: "entitlements: Apple's revocationType and revocationPercentage", statements: [
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "revocationType" text
            """,
            """
            ALTER TABLE "CaregiverEntitlement" ADD COLUMN IF NOT EXISTS "revocationPercentage" integer
            """,
        ]),
        // Instances that start together share the FCM budget (SPEC §3 "FCM's project quota"): each records the share it
        // took, and a newcomer takes only what the others' recorded shares leave until they have seen it.
        Migration(version: 11, name: "live instances record their share of the FCM send budget", statements: [
            """
            ALTER TABLE "_medication_worker_instances" ADD COLUMN IF NOT EXISTS "sendShare" double precision
            """,
        ]),
    ]
}
