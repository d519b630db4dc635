"""The peer: what a team would otherwise write. psycopg + firebase-admin's send_each, one batch at a
time, same tables and the same semantics as far as a small worker goes (claim with SKIP LOCKED, one
delivery row per device, mark results). Pointed at the same FCM stand-in and token endpoint.
Usage: peer_worker.py DATABASE_URL SERVICE_ACCOUNT_JSON FCM_BASE_URL   (REQUESTS_CA_BUNDLE trusts the test CA)"""
import hashlib
import sys
import time

import firebase_admin
import psycopg
from firebase_admin import credentials, messaging

database_url, service_account, fcm_base = sys.argv[1:4]
messaging._MessagingService.FCM_URL = fcm_base + "/v1/projects/{0}/messages:send"
firebase_admin.initialize_app(credentials.Certificate(service_account))

CLAIM = """
UPDATE "PushOutbox" SET attempts = attempts + 1, "availableAt" = now() + interval '60 seconds'
WHERE id IN (SELECT id FROM "PushOutbox" WHERE status = 'PENDING' AND "availableAt" <= now()
             ORDER BY "availableAt", id LIMIT 100 FOR UPDATE SKIP LOCKED)
RETURNING id, "patientId", payload
"""
FAN_OUT = """
INSERT INTO "PushDelivery" (id, "eventKey", "pushDeviceId", status, "createdAt")
SELECT gen_random_uuid()::text, %s, d.id, 'PENDING', now()
FROM "CaregiverPatientLink" l JOIN "PushDevice" d ON d."ownerType" = 'CAREGIVER' AND d."ownerId" = l."caregiverId" AND d."isEnabled"
WHERE l."patientId" = %s AND l.status = 'ACTIVE'
ON CONFLICT ("eventKey", "pushDeviceId") DO NOTHING
"""
PENDING = """
SELECT pd.id, d.token FROM "PushDelivery" pd JOIN "PushDevice" d ON d.id = pd."pushDeviceId"
WHERE pd."eventKey" = %s AND pd.status = 'PENDING'
"""

sent = 0
started = time.time()
with psycopg.connect(database_url, autocommit=True) as conn:
    while True:
        with conn.transaction():
            events = conn.execute(CLAIM).fetchall()
        if not events:
            break
        names = dict(conn.execute('SELECT id, "displayName" FROM "Patient" WHERE id = ANY(%s)',
                                  ([e[1] for e in events],)).fetchall())
        for event_id, patient_id, payload in events:
            key = "doseTaken:" + payload["recordingGroupId"]
            conn.execute(FAN_OUT, (key, patient_id))
            rows = conn.execute(PENDING, (key,)).fetchall()
            body = f"{names[patient_id]}さんが{'時間内に' if payload.get('withinTime') else ''}薬を服用しました"
            msgs = [messaging.Message(
                token=token,
                notification=messaging.Notification(title="服薬記録", body=body),
                data={"type": "DOSE_TAKEN", "patientId": patient_id, "date": payload["date"], "slot": payload["slot"],
                      "recordingGroupId": payload.get("recordingGroupId") or ""},
                apns=messaging.APNSConfig(headers={"apns-collapse-id": hashlib.sha256(key.encode()).hexdigest()},
                                          payload=messaging.APNSPayload(aps=messaging.Aps(sound="default", thread_id="patient-" + patient_id))))
                for _, token in rows]
            if msgs:
                response = messaging.send_each(msgs)
                for (delivery_id, _), result in zip(rows, response.responses):
                    if result.success:
                        conn.execute('UPDATE "PushDelivery" SET status = %s, "sentAt" = now(), "fcmMessageId" = %s WHERE id = %s',
                                     ("SENT", result.message_id, delivery_id))
                        sent += 1
            conn.execute('UPDATE "PushOutbox" SET status = %s, "processedAt" = now() WHERE id = %s', ("DONE", event_id))
elapsed = time.time() - started
print(f"peer sent {sent} in {elapsed:.2f} s: {sent / elapsed:.0f} deliveries/s")
