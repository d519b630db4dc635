import Foundation
import Testing

/// docs/architecture.md's "One push, hop by hop", checked against the sources: at most 30 hops, each type visited at
/// most twice (a visit is a stretch of consecutive hops in one type), and every hop's method declared on its type.
@Suite struct HopPathTests {
    /// The list's hops in order, as (type, method): the first backquoted `Type.method` of each numbered line.
    static func hops(_ markdown: String) -> [(type: String, method: String)] {
        guard let start = markdown.range(of: "## One push, hop by hop") else { return [] }
        let section = markdown[start.upperBound...]
        let end = section.range(of: "\n## ")?.lowerBound ?? section.endIndex
        return section[..<end].split(separator: "\n").compactMap { line in
            guard line.first?.isNumber == true, let open = line.firstIndex(of: "`") else { return nil }
            let name = line[line.index(after: open)...].prefix { $0 != "`" }
            guard let dot = name.lastIndex(of: ".") else { return nil }
            return (String(name[..<dot]), String(name[name.index(after: dot)...]))
        }
    }

    /// How many visits each type gets.
    static func visits(_ hops: [(type: String, method: String)]) -> [String: Int] {
        var visits: [String: Int] = [:]
        for (index, hop) in hops.enumerated() where index == 0 || hops[index - 1].type != hop.type {
            visits[hop.type, default: 0] += 1
        }
        return visits
    }

    @Test func thePath_isAtMost30Hops_eachTypeVisitedAtMostTwice() throws {
        let hops = Self.hops(try ModuleFloorsTests.read("docs/architecture.md"))
        #expect(hops.count >= 20, "the hop list was not found")
        #expect(hops.count <= 30)
        let twiceOrMore = Self.visits(hops).filter { $0.value > 2 }
        #expect(twiceOrMore.isEmpty, "\(twiceOrMore)")
    }

    @Test func everyHop_isAMethodOfItsType() throws {
        let sources = ModuleFloorsTests.root.appendingPathComponent("Sources")
        var text = ""
        for case let url as URL in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)! where url.pathExtension == "swift" {
            text += try String(contentsOf: url, encoding: .utf8)
        }
        let missing = Self.hops(try ModuleFloorsTests.read("docs/architecture.md")).filter { hop in
            let type = hop.type.split(separator: ".").last.map(String.init) ?? hop.type
            let declared = ["struct", "class", "enum", "actor", "extension"].contains { text.contains("\($0) \(type)") }
            let member = ["func \(hop.method)(", "func \(hop.method)<", "var \(hop.method):", "let \(hop.method):"].contains { text.contains($0) }
            return !(declared && member)
        }
        #expect(missing.isEmpty, "\(missing)")
    }

    @Test func visits_countStretchesNotHops() {
        let hops = [("A", "a"), ("A", "b"), ("B", "c"), ("A", "d"), ("C", "e"), ("A", "f")].map { (type: $0.0, method: $0.1) }
        #expect(Self.visits(hops) == ["A": 3, "B": 1, "C": 1])
    }
}
