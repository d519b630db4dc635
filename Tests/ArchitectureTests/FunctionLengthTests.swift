import Foundation
import Testing

/// No function of the product is longer than a screen: 60 lines from its declaration to its closing brace.
@Suite struct FunctionLengthTests {
    static let limit = 60

    @Test func noFunctionInSources_isOverSixtyLines() throws {
        let sources = ModuleFloorsTests.root.appendingPathComponent("Sources")
        var long: [String] = []
        for case let url as URL in FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)!
        where url.pathExtension == "swift" {
            let text = try String(contentsOf: url, encoding: .utf8)
            for function in functionLengths(text) where function.lines > Self.limit {
                long.append("\(url.path.replacingOccurrences(of: sources.path + "/", with: "")):\(function.line) \(function.lines) lines")
            }
        }
        #expect(long.isEmpty, "\(long.joined(separator: "\n"))")
    }

    @Test func counter_measuresFromTheDeclarationToItsClosingBrace() {
        let text = """
            struct S {
                func short() { print(1) }
                private static func long(
                    _ a: Int
                ) -> Int {
                    let b = "}"
                    return a
                }
            }
            """
        // A brace inside a string literal is not counted as code's.
        #expect(functionLengths(text).map(\.lines) == [1, 6])
        #expect(functionLengths(text).map(\.line) == [2, 3])
    }
}

/// Each `func`, `init` and `deinit` of `text` with its first line (1-based) and its length in lines.
func functionLengths(_ text: String) -> [(line: Int, lines: Int)] {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let declaration = /^\s*(@\w+(\([^)]*\))?\s+)*((public|private|fileprivate|internal|package|static|class|override|mutating|nonisolated|final|convenience|required)\s+)*(func|init|deinit)\b/
    var found: [(line: Int, lines: Int)] = []
    for (start, line) in lines.enumerated() where line.firstMatch(of: declaration) != nil {
        var depth = 0, opened = false, end = start
        scan: while end < lines.count {
            var inString = false, previous: Character = " "
            for character in lines[end] {
                if character == "\"" && previous != "\\" { inString.toggle() }
                if !inString && character == "{" { depth += 1; opened = true }
                if !inString && character == "}" { depth -= 1 }
                if opened && depth == 0 { break scan }
                previous = character
            }
            if !opened && end > start + 8 { break }  // a protocol requirement: no body
            end += 1
        }
        if opened { found.append((start + 1, end - start + 1)) }
    }
    return found
}
