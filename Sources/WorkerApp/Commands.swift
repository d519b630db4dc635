import FoundationEssentials
import Timekeeping
import Logging
import Outbox
import Postgres
import Schema
import WorkerConfig

/// The one-shot operator commands.
enum Commands {
    static func migrate(environment: [String: String]) async -> Int32 {
        let settings: (databaseURL: String, logLevel: LogLevel)
        do { settings = try Configuration.loadDatabaseOnly(from: environment) } catch {
            return WorkerApp.configurationFailed(error)
        }
        let client = PostgresClient(conninfo: settings.databaseURL, maxConnections: 1)
        do {
            let report = try await Migrator().migrate(client)
            if report.applied.isEmpty {
                print("schema is current (version \(report.currentVersion)); nothing to do")
            } else {
                print("applied migrations \(report.applied.map(String.init).joined(separator: ", ")); schema version \(report.currentVersion)")
            }
            return WorkerApp.ExitStatus.ok
        } catch {
            WorkerApp.printError("medication-worker: migrate failed: \(error)")
            return WorkerApp.ExitStatus.failure
        }
    }

    static func checkConfig(environment: [String: String]) -> Int32 {
        do {
            let configuration = try Daemon.loadConfiguration(environment: environment)
            print(configuration.redactedDescription)
            print("configuration OK")
            return WorkerApp.ExitStatus.ok
        } catch {
            return WorkerApp.configurationFailed(error)
        }
    }

    static func status(environment: [String: String]) async -> Int32 {
        let settings: (databaseURL: String, logLevel: LogLevel)
        do { settings = try Configuration.loadDatabaseOnly(from: environment) } catch {
            return WorkerApp.configurationFailed(error)
        }
        let client = PostgresClient(conninfo: settings.databaseURL, maxConnections: 1)
        do {
            let status = try await OutboxAdmin(client: client).status()
            print(render(status))
            return WorkerApp.ExitStatus.ok
        } catch {
            WorkerApp.printError("medication-worker: status failed: \(error)")
            return WorkerApp.ExitStatus.failure
        }
    }

    static func render(_ status: OutboxAdmin.Status) -> String {
        func age(_ seconds: Double?) -> String {
            guard let seconds else { return "-" }
            if seconds < 120 { return seconds.fixed(0) + "s" }
            if seconds < 7200 { return (seconds / 60).fixed(0) + "m" }
            if seconds < 172_800 { return (seconds / 3600).fixed(1) + "h" }
            return (seconds / 86_400).fixed(1) + "d"
        }
        func size(_ bytes: Int) -> String {
            bytes >= 1 << 20 ? (Double(bytes) / 1_048_576).fixed(1) + " MiB" : (Double(bytes) / 1024).fixed(0) + " KiB"
        }
        let events = status.events
        return """
            outbox events:   pending \(events[.pending] ?? 0) (due now \(status.duePending)), done \(events[.done] ?? 0), \
            dead \(events[.dead] ?? 0), expired \(events[.expired] ?? 0)
            oldest pending:  \(age(status.oldestPendingSeconds))
            deliveries (1h): sent \(status.recentDeliveries[.sent] ?? 0), failed \(status.recentDeliveries[.failed] ?? 0), \
            pending \(status.recentDeliveries[.pending] ?? 0)
            table sizes:     "PushOutbox" \(size(status.outboxBytes)), "PushDelivery" \(size(status.deliveryBytes))
            oldest finished: \(age(status.oldestFinishedSeconds)) (pruned after OUTBOX_RETENTION)
            """
    }

    static func redrive(environment: [String: String], eventId: Int64?) async -> Int32 {
        let settings: (databaseURL: String, logLevel: LogLevel)
        do { settings = try Configuration.loadDatabaseOnly(from: environment) } catch {
            return WorkerApp.configurationFailed(error)
        }
        let client = PostgresClient(conninfo: settings.databaseURL, maxConnections: 1)
        do {
            let ids = try await OutboxAdmin(client: client).redrive(eventId: eventId)
            print(ids.isEmpty ? "no DEAD events" : "redriven \(ids.count) event(s): \(ids.prefix(20).map(String.init).joined(separator: ", "))\(ids.count > 20 ? ", …" : "")")
            return WorkerApp.ExitStatus.ok
        } catch {
            WorkerApp.printError("medication-worker: redrive failed: \(error)")
            return WorkerApp.ExitStatus.failure
        }
    }
}
