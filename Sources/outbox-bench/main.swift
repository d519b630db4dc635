import FoundationEssentials
import Glibc
import OutboxBench

// outbox-bench: the pipeline's own SQL for the benchmarks; built beside the worker, never shipped.
//   outbox-bench pgbench-script [--batch N]   one batch's claim, fan-out and completion as a pgbench script (bench/run)
//   outbox-bench claim-sql                    the claim statement, its parameters numbered (scripts/claim-plan)

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "pgbench-script":
    let size = arguments.count == 3 && arguments[1] == "--batch" ? Int(arguments[2]) ?? 100 : 100
    print(PgbenchScript.script(batchSize: size), terminator: "")
case "claim-sql":
    print(PgbenchScript.claimSQL)
default:
    var usage = "usage: outbox-bench pgbench-script [--batch N] | outbox-bench claim-sql\n"
    usage.withUTF8 { bytes in _ = write(STDERR_FILENO, bytes.baseAddress, bytes.count) }
    exit(64)
}
