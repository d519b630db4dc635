import FoundationEssentials
import Synchronization

/// A process-wide set of Prometheus metrics, rendered in text format 0.0.4.
/// Thread-safe; components receive the registry and create their series up front.
public final class MetricsRegistry: Sendable {
    private struct State {
        var families: [String: Family] = [:]
        var order: [String] = []
        var collectors: [@Sendable () -> Void] = []

        mutating func family(_ name: String, help: String, type: String) -> Family {
            if let existing = families[name] { return existing }
            let created = Family(name: name, help: help, type: type)
            families[name] = created
            order.append(name)
            return created
        }
    }

    private let state = Mutex(State())

    public init() {}

    final class Family {
        let name: String
        let help: String
        let type: String
        var series: [String: Series] = [:]
        var seriesOrder: [String] = []
        init(name: String, help: String, type: String) {
            self.name = name
            self.help = help
            self.type = type
        }
    }

    enum Series {
        case value(Cell)
        case histogram(Histogram)
    }

    /// A monotonically increasing counter series.
    public func counter(_ name: String, help: String, labels: [String: String] = [:]) -> Counter {
        Counter(cell: cell(name, help: help, type: "counter", labels: labels))
    }

    /// A gauge series that can go up and down, or be set.
    public func gauge(_ name: String, help: String, labels: [String: String] = [:]) -> Gauge {
        Gauge(cell: cell(name, help: help, type: "gauge", labels: labels))
    }

    /// A histogram series with the given upper bounds (seconds for durations).
    public func histogram(_ name: String, help: String, labels: [String: String] = [:],
                          buckets: [Double] = Histogram.defaultBuckets) -> Histogram {
        state.withLock { state in
            let family = state.family(name, help: help, type: "histogram")
            let key = Self.labelString(labels)
            if case .histogram(let existing)? = family.series[key] { return existing }
            let histogram = Histogram(labels: labels, buckets: buckets)
            family.series[key] = .histogram(histogram)
            family.seriesOrder.append(key)
            return histogram
        }
    }

    /// Registers a closure run before each render (to refresh gauges read from elsewhere).
    public func onCollect(_ collect: @escaping @Sendable () -> Void) {
        state.withLock { $0.collectors.append(collect) }
    }

    /// The current value of a counter or gauge series, for tests and status lines.
    public func value(_ name: String, labels: [String: String] = [:]) -> Double? {
        state.withLock { state in
            guard case .value(let cell)? = state.families[name]?.series[Self.labelString(labels)] else { return nil }
            return cell.get()
        }
    }

    /// Renders every family in Prometheus text exposition format 0.0.4.
    public func render() -> String {
        let hooks = state.withLock { $0.collectors }
        for hook in hooks { hook() }
        return state.withLock { state in
            var out = ""
            for name in state.order {
                guard let family = state.families[name] else { continue }
                out += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.type)\n"
                for key in family.seriesOrder {
                    switch family.series[key] {
                    case .value(let cell)?:
                        out += "\(name)\(key) \(Self.format(cell.get()))\n"
                    case .histogram(let histogram)?:
                        out += histogram.render(name: name)
                    case nil:
                        break
                    }
                }
            }
            return out
        }
    }

    private func cell(_ name: String, help: String, type: String, labels: [String: String]) -> Cell {
        state.withLock { state in
            let family = state.family(name, help: help, type: type)
            let key = Self.labelString(labels)
            if case .value(let existing)? = family.series[key] { return existing }
            let cell = Cell()
            family.series[key] = .value(cell)
            family.seriesOrder.append(key)
            return cell
        }
    }

    static func labelString(_ labels: [String: String]) -> String {
        guard !labels.isEmpty else { return "" }
        let pairs = labels.keys.sorted().map { key in
            let value = labels[key]!
                .replacing("\\", with: "\\\\")
                .replacing("\"", with: "\\\"")
                .replacing("\n", with: "\\n")
            return "\(key)=\"\(value)\""
        }
        return "{" + pairs.joined(separator: ",") + "}"
    }

    static func format(_ value: Double) -> String {
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

/// A thread-safe double cell shared by counters and gauges.
final class Cell: Sendable {
    private let current = Mutex(0.0)
    func add(_ delta: Double) { current.withLock { $0 += delta } }
    func set(_ value: Double) { current.withLock { $0 = value } }
    func get() -> Double { current.withLock { $0 } }
}

/// A counter series.
public struct Counter: Sendable {
    let cell: Cell
    /// Adds `amount` (default 1).
    public func increment(by amount: Double = 1) { cell.add(amount) }
}

/// A gauge series.
public struct Gauge: Sendable {
    let cell: Cell
    public func set(_ value: Double) { cell.set(value) }
    public func add(_ delta: Double) { cell.add(delta) }
}

/// A cumulative histogram series.
public final class Histogram: Sendable {
    /// Latency buckets from 1 ms to 10 s.
    public static let defaultBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    private struct State {
        var counts: [UInt64]
        var sum = 0.0
        var total: UInt64 = 0
    }

    private let labels: [String: String]
    private let bounds: [Double]
    private let state: Mutex<State>

    init(labels: [String: String], buckets: [Double]) {
        self.labels = labels
        self.bounds = buckets.sorted()
        self.state = Mutex(State(counts: Array(repeating: 0, count: buckets.count)))
    }

    /// Records one observation.
    public func observe(_ value: Double) {
        let index = bounds.firstIndex(where: { value <= $0 })
        state.withLock { state in
            if let index { state.counts[index] += 1 }
            state.sum += value
            state.total += 1
        }
    }

    func render(name: String) -> String {
        let (counts, sum, total) = state.withLock { ($0.counts, $0.sum, $0.total) }
        do {
            var out = ""
            var cumulative: UInt64 = 0
            for (index, bound) in bounds.enumerated() {
                cumulative += counts[index]
                var withLe = labels
                withLe["le"] = MetricsRegistry.format(bound)
                out += "\(name)_bucket\(MetricsRegistry.labelString(withLe)) \(cumulative)\n"
            }
            var inf = labels
            inf["le"] = "+Inf"
            out += "\(name)_bucket\(MetricsRegistry.labelString(inf)) \(total)\n"
            out += "\(name)_sum\(MetricsRegistry.labelString(labels)) \(sum)\n"
            out += "\(name)_count\(MetricsRegistry.labelString(labels)) \(total)\n"
            return out
        }
    }
}
