/// Builds a pgbench script from the pipeline's own statements (not copies), so the benchmark's
/// SQL ceiling measures exactly what the worker runs: per batch, one claim, the fan-out statement and
/// the completion statement, with every delivery SENT.
package enum PgbenchScript {
    /// The claim statement (for `scripts/claim-plan`).
    package static var claimSQL: String { OutboxStore.claimSQL }

    /// `$n` → `:prefix_n` (pgbench variables), so `-M extended` binds them as parameters.
    static func bind(_ sql: String, _ names: [String]) -> String {
        var text = sql
        for (index, name) in names.enumerated().reversed() {
            text = text.replacing("$\(index + 1)", with: ":\(name)")
        }
        return text
    }

    /// The completion statement's text (its parameters in the order they are written: the deliveries' five arrays,
    /// the attempt limit, the events' five arrays).
    static var completeSQL: String {
        OutboxStore.completeQuery(deliveries: [], keys: [], kinds: [], details: [], tokens: [], events: [], maxAttempts: 0).sql
    }

    /// The script for one batch of `batchSize` events.
    package static func script(batchSize: Int, leaseSeconds: Int = 60, maxAgeSeconds: Int = 86_400, maxAttempts: Int = 10) -> String {
        let claim = bind(OutboxStore.claimSQL, ["limit", "worker", "token", "lease", "maxage"])
        return """
            SELECT \(batchSize) AS limit, 'pgbench' AS worker, gen_random_uuid()::text AS token, \(leaseSeconds) AS lease, \(maxAgeSeconds) AS maxage, \(maxAttempts) AS maxattempts \\gset
            WITH c AS (\(claim))
            SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg('doseTaken:' || (payload::jsonb ->> 'recordingGroupId')), '{}') AS keys,
                   coalesce(array_agg("patientId"), '{}') AS pids, coalesce(array_agg(0.0::float8), '{}') AS delays,
                   coalesce(array_agg(NULL::text), '{}') AS errs,
                   coalesce(array_agg(:token::text), '{}') AS etokens, '{}'::text AS retried FROM c \\gset
            \(bind(OutboxStore.fanOutCTEs, ["keys", "pids", "token", "lease", "retried"])), d AS (SELECT id, "eventKey" FROM inserted UNION ALL SELECT id, "eventKey" FROM reclaimed)
            SELECT coalesce(array_agg(id), '{}') AS dids, coalesce(array_agg('SENT'::text), '{}') AS dkinds,
                   coalesce(array_agg('projects/bench/messages/' || id), '{}') AS names,
                   coalesce(array_agg(:token::text), '{}') AS dtokens, coalesce(array_agg("eventKey"), '{}') AS dkeys FROM d \\gset
            \(bind(completeSQL, ["dids", "dkinds", "names", "dtokens", "dkeys", "maxattempts", "ids", "keys", "delays", "errs", "etokens"]));

            """
    }
}
