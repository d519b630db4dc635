import FoundationEssentials
import Glibc
import WorkerApp

let status = await WorkerApp.main(arguments: CommandLine.arguments, environment: ProcessInfo.processInfo.environment)
exit(status)
