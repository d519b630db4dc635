import CMalloc
import FoundationEssentials
import Glibc
import Metrics

/// Standard process metrics (resident memory, open fds, start time), read from /proc at scrape time.
public enum ProcessMetrics {
    /// Registers the gauges and a collector that refreshes them before each render.
    public static func register(in registry: MetricsRegistry) {
        let resident = registry.gauge("process_resident_memory_bytes", help: "Resident memory size in bytes.")
        let fds = registry.gauge("process_open_fds", help: "Number of open file descriptors.")
        let start = registry.gauge("process_start_time_seconds", help: "Start time of the process since unix epoch in seconds.")
        start.set(startTime() ?? Date().timeIntervalSince1970)
        registry.onCollect {
            if let pages = residentPages() { resident.set(Double(pages * sysconf(Int32(_SC_PAGESIZE)))) }
            fds.set(Double((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0))
        }
    }

    /// Gives the heap pages malloc holds free back to the kernel (glibc `malloc_trim`: the top of each arena, and
    /// whole free pages inside them). A long-running daemon's resident size otherwise keeps the high-water mark of
    /// every burst, fragmented across arenas; called every few seconds, it costs a walk of the free lists.
    public static func returnFreeMemory() {
        _ = malloc_trim(0)
    }

    /// Second field of /proc/self/statm.
    static func residentPages() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        return fields.count > 1 ? Int(fields[1]) : nil
    }

    /// Process start from /proc/self/stat (field 22, clock ticks after boot) and btime of /proc/stat.
    static func startTime() -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let ticks = Double(fields[19]),
              let boot = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = boot.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
              let btime = Double(line.dropFirst(6)) else { return nil }
        return btime + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
