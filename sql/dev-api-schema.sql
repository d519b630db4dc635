-- The web API's tables (SPEC §2.1) as its Prisma schema creates them, for tests, the demo,
-- the fault suite and the benchmark. Production databases already have them.
CREATE TABLE "Patient" (id text PRIMARY KEY, "displayName" text NOT NULL,
    "createdAt" timestamptz NOT NULL DEFAULT now(), "updatedAt" timestamptz NOT NULL DEFAULT now());

CREATE TABLE "CaregiverPatientLink" (id text PRIMARY KEY, "caregiverId" text NOT NULL, "patientId" text NOT NULL,
    status text NOT NULL, "createdAt" timestamptz NOT NULL DEFAULT now(), "updatedAt" timestamptz NOT NULL DEFAULT now());

-- Prisma's schema makes "patientId" unique today (one caregiver per patient, SPEC 2.1); the worker must still handle
-- N links, which the tests exercise, so this stand-in indexes the column without the uniqueness. The fan-out finds a
-- patient's links through it.
CREATE INDEX "CaregiverPatientLink_patientId_idx" ON "CaregiverPatientLink" ("patientId");

CREATE TABLE "PushDevice" (id text PRIMARY KEY, "ownerType" text NOT NULL, "ownerId" text NOT NULL, token text NOT NULL,
    platform text NOT NULL DEFAULT 'ios', environment text NOT NULL DEFAULT 'PROD', "isEnabled" boolean NOT NULL DEFAULT true,
    "lastSeenAt" timestamptz NOT NULL DEFAULT now(), "createdAt" timestamptz NOT NULL DEFAULT now(),
    "updatedAt" timestamptz NOT NULL DEFAULT now());

CREATE UNIQUE INDEX "PushDevice_ownerType_ownerId_token_key" ON "PushDevice" ("ownerType", "ownerId", token);

CREATE TABLE "PushDelivery" (id text PRIMARY KEY, "eventKey" text NOT NULL,
    "pushDeviceId" text NOT NULL REFERENCES "PushDevice"(id) ON DELETE CASCADE,
    "createdAt" timestamptz NOT NULL DEFAULT now());

CREATE UNIQUE INDEX "PushDelivery_eventKey_pushDeviceId_key" ON "PushDelivery" ("eventKey", "pushDeviceId");

CREATE TABLE "CaregiverEntitlement" (id text PRIMARY KEY, "caregiverId" text NOT NULL, "productId" text NOT NULL,
    "originalTransactionId" text NOT NULL, "transactionId" text NOT NULL, environment text NOT NULL, status text NOT NULL,
    "purchasedAt" timestamptz NOT NULL, "createdAt" timestamptz NOT NULL DEFAULT now(),
    "updatedAt" timestamptz NOT NULL DEFAULT now());

CREATE UNIQUE INDEX "CaregiverEntitlement_originalTransactionId_key" ON "CaregiverEntitlement" ("originalTransactionId");

