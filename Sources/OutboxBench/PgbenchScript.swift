import Outbox
import Postgres

/// Builds a pgbench script from the pipeline's own statements (not copies), so the benchmark's
/// SQL ceiling measures exactly what the worker runs: per batch, one claim, the fan-out statement and
/// the completion statement, with every delivery SENT.
public enum PgbenchScript {
    /// The claim statement (for `scripts/claim-plan`), its parameters numbered by name as that script substitutes
    /// them: `$1` limit, `$2` worker, `$3` token, `$4` lease (both places), `$5` maximum age.
    public static var claimSQL: String {
        var variables = Variables()
        let claim = claimQuery(&variables)
        return variables.numbered(claim)
    }

    /// The claim with every parameter a pgbench variable: `limit`, `worker`, `token`, `lease` (the age comes back as a column).
    static func claimQuery(_ variables: inout Variables) -> PostgresQuery {
        OutboxStore.claimQuery(limit: variables.int("limit"), worker: variables.text("worker"), token: variables.token("token"),
                               lease: variables.seconds("lease"))
    }

    /// The script for one batch of `batchSize` events.
    public static func script(batchSize: Int, leaseSeconds: Int = 60, maxAgeSeconds: Int = 86_400, maxAttempts: Int = 10) -> String {
        var variables = Variables()
        let claim = claimQuery(&variables)
        let fanOut = DeliveryFanOut.fanOutCTEs(keys: variables.texts("keys"), patients: variables.texts("pids"), token: variables.token("token"),
                                            lease: variables.seconds("lease"), retried: variables.texts("retried"))
        let complete = OutboxStore.completeQuery(
            deliveries: variables.texts("dids"), kinds: variables.texts("dkinds"), details: variables.texts("names"), tokens: variables.texts("dtokens"),
            deliveryKeys: variables.texts("dkeys"), sentAt: variables.optionalDoubles("answered"), sendStartedAt: variables.optionalDoubles("started"),
            maxAttempts: variables.int("maxattempts"), events: variables.ints("ids"),
            keys: variables.texts("keys"), patients: variables.texts("pids"), delays: variables.doubles("delays"), errors: variables.optionalTexts("errs"),
            leases: variables.texts("etokens"), expected: variables.texts("expected"))
        return """
            SELECT \(batchSize) AS limit, 'pgbench' AS worker, gen_random_uuid()::text AS token, \(leaseSeconds) AS lease, \(maxAgeSeconds) AS maxage, \(maxAttempts) AS maxattempts \\gset
            WITH c AS (\(variables.pgbench(claim)))
            SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg('doseTaken:' || (payload::jsonb ->> 'recordingGroupId')), '{}') AS keys,
                   coalesce(array_agg("patientId"), '{}') AS pids, coalesce(array_agg(0.0::float8), '{}') AS delays,
                   coalesce(array_agg(NULL::text), '{}') AS errs,
                   coalesce(array_agg(:token::text), '{}') AS etokens, coalesce(array_agg(''::text), '{}') AS expected,
                   '{}'::text AS retried FROM c \\gset
            \(variables.pgbench(fanOut)), d AS (SELECT id, "eventKey" FROM inserted UNION ALL SELECT id, "eventKey" FROM reclaimed)
            SELECT coalesce(array_agg(id), '{}') AS dids, coalesce(array_agg('\(DeliveryStatus.sent.rawValue)'::text), '{}') AS dkinds,
                   coalesce(array_agg('projects/bench/messages/' || id), '{}') AS names,
                   coalesce(array_agg(:token::text), '{}') AS dtokens, coalesce(array_agg("eventKey"), '{}') AS dkeys,
                   coalesce(array_agg(extract(epoch FROM clock_timestamp())::float8), '{}') AS answered,
                   coalesce(array_agg(NULL::float8), '{}') AS started FROM d \\gset
            \(variables.pgbench(complete));

            """
    }

    /// pgbench variables standing for a statement's parameters. Each is handed to the statement as a value that no
    /// other variable has (a name given again, in another statement, may take the same value), so every bind of the statement is mapped back to the variable it was given by name,
    /// wherever and however often the statement binds it; a bind that was not given a variable traps.
    struct Variables {
        /// The names, in the order first given.
        private(set) var names: [String] = []
        private var nameOf: [PostgresValue: String] = [:]

        /// A value no real parameter takes: a number far outside any limit, lease or id the scripts use.
        private var marker: Int { 900_000_000 + nameOf.count }

        private mutating func given<T>(_ name: String, _ value: T, as bind: PostgresValue) -> T {
            precondition(nameOf[bind] ?? name == name, "pgbench variables \(name) and \(nameOf[bind] ?? "") are not distinct")
            nameOf[bind] = name
            if !names.contains(name) { names.append(name) }
            return value
        }

        mutating func int(_ name: String) -> Int { let value = marker; return given(name, value, as: .int(Int64(value))) }
        mutating func text(_ name: String) -> String { given(name, "\u{1}\(name)", as: .text("\u{1}\(name)")) }
        mutating func seconds(_ name: String) -> Duration {
            let value = marker
            return given(name, .seconds(value), as: .double(Double(value)))
        }
        mutating func token(_ name: String) -> LeaseToken { let token = LeaseToken(); return given(name, token, as: .text(token.text)) }
        mutating func texts(_ name: String) -> [String] { given(name, ["\u{1}\(name)"], as: .textArray(["\u{1}\(name)"])) }
        mutating func optionalTexts(_ name: String) -> [String?] { given(name, ["\u{1}\(name)"], as: .optionalTextArray(["\u{1}\(name)"])) }
        mutating func ints(_ name: String) -> [Int64] { let value = Int64(marker); return given(name, [value], as: .intArray([value])) }
        mutating func doubles(_ name: String) -> [Double] { let value = Double(marker); return given(name, [value], as: .doubleArray([value])) }
        mutating func optionalDoubles(_ name: String) -> [Double?] {
            let value = Double(marker)
            return given(name, [value], as: .optionalDoubleArray([value]))
        }

        private func name(_ bind: PostgresValue) -> String {
            guard let name = nameOf[bind] else { preconditionFailure("a statement parameter was not given a pgbench variable") }
            return name
        }

        /// The statement with each parameter written `:name` (pgbench `-M extended` binds them as parameters).
        func pgbench(_ query: PostgresQuery) -> String { query.sql { _, bind in ":" + name(bind) } }

        /// The statement with each parameter written `$k`, `k` its variable's place in `names` (one number per name).
        func numbered(_ query: PostgresQuery) -> String { query.sql { _, bind in "$\(names.firstIndex(of: name(bind))! + 1)" } }
    }
}
