import Foundation
import OutboxBench
import Testing

@Suite("pgbench script from the pipeline's statements")
struct PgbenchScriptTests {
    /// Every parameter of the claim, fan-out and completion statements becomes the pgbench variable it was given by name;
    /// no `$n` and no stand-in value is left in the script.
    @Test func script_bindsEveryParameterAsItsNamedVariable() {
        let script = PgbenchScript.script(batchSize: 7)
        #expect(script.firstRange(of: /\$[0-9]/) == nil)
        #expect(!script.contains("\u{1}") && !script.contains("900000"))
        for variable in ["limit", "worker", "token", "lease", "keys", "pids", "retried", "dids", "dkinds", "names", "dtokens",
                         "dkeys", "maxattempts", "ids", "delays", "errs", "etokens"] {
            #expect(script.contains(":\(variable)"), "no :\(variable) in the script")
        }
        #expect(script.contains("LIMIT :limit") && script.contains("unnest(:keys::text[], :pids::text[])"))
    }

    /// `scripts/claim-plan` substitutes `$1` limit, `$2` worker, `$3` token, `$4` lease (twice); the age is returned,
    /// not bound (`EventFate.atClaim` judges it).
    @Test func claimSQL_numbersParametersByName_asClaimPlanSubstitutesThem() {
        let sql = PgbenchScript.claimSQL
        #expect(sql.contains("LIMIT $1") && sql.contains(#""leasedBy" = $2"#) && sql.contains("$3::uuid"))
        #expect(sql.components(separatedBy: "$4::double precision").count == 3)
        #expect(!sql.contains("$5") && sql.contains("AS age_seconds"))
    }
}
