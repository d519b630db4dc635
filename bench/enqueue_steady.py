"""Enqueues DOSE_TAKEN events one transaction each at a steady rate, recording each COMMIT's wall time.
Usage: enqueue_steady.py DATABASE_URL COUNT RATE PATIENTS OUT.json"""
import json
import sys
import time

import psycopg

url, count, rate, patients, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
commits = {}
with psycopg.connect(url) as conn:
    start = time.perf_counter()
    for i in range(count):
        target = start + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        group = f"lat-{i}"
        payload = json.dumps({"date": "2026-02-11", "slot": "morning", "recordingGroupId": group, "withinTime": True,
                              "isPrn": False, "takenAt": "2026-02-11T08:03:27+09:00"})
        conn.execute('INSERT INTO "PushOutbox" ("eventType", "patientId", payload) VALUES (%s, %s, %s::jsonb)',
                     ("DOSE_TAKEN", f"p{1 + i % patients}", payload))
        conn.commit()
        commits[group] = time.time()
json.dump(commits, open(out, "w"))
