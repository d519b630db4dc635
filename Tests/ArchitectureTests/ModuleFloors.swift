import Foundation

/// One target of Package.swift, read as plain text.
struct ManifestTarget: Equatable {
    enum Kind: String { case systemLibrary, target, executableTarget, testTarget }
    var name: String
    var kind: Kind
    var dependencies: [String]
    /// The `path:` argument, when the target has one.
    var path: String?

    /// Where its sources are, relative to the package root.
    var sourceDirectory: String { path ?? (kind == .testTarget ? "Tests/\(name)" : "Sources/\(name)") }
}

/// The targets of a Package.swift: every `.systemLibrary(`, `.target(`, `.executableTarget(` and `.testTarget(` call,
/// its `name:`, its `dependencies: [...]` (string names) and its `path:`. Line comments are ignored.
func parseManifest(_ text: String) -> [ManifestTarget] {
    let source = text.split(separator: "\n", omittingEmptySubsequences: false)
        .map { line in line.range(of: "//").map { String(line[..<$0.lowerBound]) } ?? String(line) }
        .joined(separator: "\n")
    let call = /\.(systemLibrary|target|executableTarget|testTarget)\(\s*name:\s*"([^"]+)"/
    return source.matches(of: call).map { match in
        let arguments = balanced(source[match.range.upperBound...], open: "(", close: ")")
        var dependencies: [String] = []
        if let list = arguments.range(of: "dependencies:") {
            let rest = arguments[list.upperBound...]
            if let bracket = rest.firstIndex(of: "[") {
                let inside = balanced(rest[rest.index(after: bracket)...], open: "[", close: "]")
                dependencies = inside.matches(of: /"([^"]+)"/).map { String($0.output.1) }
            }
        }
        let path = arguments.firstMatch(of: /path:\s*"([^"]+)"/).map { String($0.output.1) }
        return ManifestTarget(name: String(match.output.2), kind: ManifestTarget.Kind(rawValue: String(match.output.1))!,
                              dependencies: dependencies, path: path)
    }
}

/// The text from the start of `text` up to the `close` that balances an already-open `open`.
private func balanced(_ text: Substring, open: Character, close: Character) -> Substring {
    var depth = 1
    for index in text.indices {
        if text[index] == open { depth += 1 }
        if text[index] == close {
            depth -= 1
            if depth == 0 { return text[..<index] }
        }
    }
    return text
}

/// The floors as docs/architecture.md states them.
struct FloorMap {
    struct Floor {
        var number: Int
        var label: String
        var modules: [String]
        /// "imported by the wrappers only".
        var wrappersOnly: Bool
        var isWrappers: Bool { label.contains("wrappers") }
    }

    var floors: [Floor]
    /// Dependencies the page names as exceptions to the wrappers-only rule (`Health` → `CMalloc`).
    var exceptions: Set<[String]>

    /// The floor of `module`; test targets sit on the floor that lists "every `.testTarget`".
    func floor(of target: ManifestTarget) -> Floor? {
        floors.first { $0.modules.contains(target.name) || (target.kind == .testTarget && $0.modules.contains(".testTarget")) }
    }
}

/// Reads the section "The modules as floors": its table rows `| N. label | `A`, `B` | imported by | … |` and the
/// exceptions its text names as `A` → `B`.
func parseFloorMap(_ markdown: String) -> FloorMap {
    let start = markdown.range(of: "## The modules as floors")!.upperBound
    let end = markdown[start...].range(of: "\n## ")?.lowerBound ?? markdown.endIndex
    var floors: [FloorMap.Floor] = []
    var exceptions: Set<[String]> = []
    for line in markdown[start..<end].split(separator: "\n") {
        if !line.hasPrefix("|") {
            for edge in line.matches(of: /`([^`]+)`\s*→\s*`([^`]+)`/) {
                exceptions.insert([String(edge.output.1), String(edge.output.2)])
            }
        }
        let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard cells.count >= 5, let floor = cells[1].firstMatch(of: /^(\d+)\.\s*(.+)$/) else { continue }
        floors.append(FloorMap.Floor(number: Int(floor.output.1)!, label: String(floor.output.2),
                                     modules: cells[2].matches(of: /`([^`]+)`/).map { String($0.output.1) },
                                     wrappersOnly: cells[3] == "the wrappers only"))
    }
    return FloorMap(floors: floors, exceptions: exceptions)
}

/// Every way `targets` break the floors of `map`, one sentence each.
func floorViolations(_ targets: [ManifestTarget], _ map: FloorMap) -> [String] {
    var problems: [String] = []
    let byName = Dictionary(targets.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    let listed = map.floors.flatMap(\.modules).filter { $0 != ".testTarget" }
    for name in Set(listed) where listed.filter({ $0 == name }).count > 1 { problems.append("\(name) is on more than one floor") }
    for name in listed where byName[name] == nil { problems.append("\(name) is on a floor but not in Package.swift") }
    var importers: [String: [String]] = [:]
    for target in targets {
        guard let floor = map.floor(of: target) else {
            problems.append("\(target.name) is in Package.swift but on no floor")
            continue
        }
        for dependency in target.dependencies {
            guard let below = byName[dependency].flatMap(map.floor(of:)) else { continue }
            if below.number >= floor.number {
                problems.append("\(target.name) (floor \(floor.number)) depends on \(dependency) (floor \(below.number)): not a lower floor")
            }
            if below.wrappersOnly && !floor.isWrappers && !map.exceptions.contains([target.name, dependency]) {
                problems.append("\(target.name) depends on \(dependency), which only the wrappers may import")
            }
            if below.number == 0 { importers[dependency, default: []].append(target.name) }
        }
    }
    for (module, names) in importers {
        let wrappers = names.filter { !map.exceptions.contains([$0, module]) }
        if wrappers.count > 1 { problems.append("\(module) is imported by \(wrappers.sorted().joined(separator: ", ")): one wrapper each") }
    }
    return problems.sorted()
}

/// Every `import` in a target's sources of another of the package's modules that Package.swift does not declare.
func undeclaredImports(_ targets: [ManifestTarget], root: URL) throws -> [String] {
    let names = Set(targets.map(\.name))
    var problems: [String] = []
    for target in targets where target.kind != .systemLibrary {
        let directory = root.appendingPathComponent(target.sourceDirectory)
        guard let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil) else { continue }
        for case let file as URL in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for line in text.split(separator: "\n") where line.contains("import ") {
                guard let match = line.firstMatch(of: /^\s*(?:@testable\s+)?(?:(?:public|package|internal|private|fileprivate)\s+)?import\s+(\w+)/)
                else { continue }
                let module = String(match.output.1)
                if names.contains(module), module != target.name, !target.dependencies.contains(module) {
                    problems.append("\(target.sourceDirectory)/\(file.lastPathComponent) imports \(module), not a dependency of \(target.name)")
                }
            }
        }
    }
    return problems.sorted()
}
