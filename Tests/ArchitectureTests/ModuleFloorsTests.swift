import Foundation
import Testing

/// docs/architecture.md's floor table, checked against Package.swift and the sources' `import` lines.
@Suite struct ModuleFloorsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    @Test func packageSwift_keepsTheFloorsOfTheArchitecturePage() throws {
        let targets = parseManifest(try Self.read("Package.swift"))
        let map = parseFloorMap(try Self.read("docs/architecture.md"))
        #expect(map.floors.count >= 10)
        #expect(targets.count >= 40)
        let problems = floorViolations(targets, map)
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    @Test func everyImportOfAPackageModule_isADeclaredDependency() throws {
        let targets = parseManifest(try Self.read("Package.swift"))
        let problems = try undeclaredImports(targets, root: Self.root)
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    @Test func parser_readsMultiLineDependenciesPathsAndSkipsComments() {
        let targets = parseManifest("""
            // .target(name: "Commented", dependencies: ["Nope"]),
            .systemLibrary(name: "CLib", pkgConfig: "lib", providers: [.apt(["lib-dev"])]),
            .target(name: "Wrapper", dependencies: ["CLib"]),
            .target(name: "App", dependencies: [
                "Wrapper", // the one wrapper
                "Base",
            ]),
            .target(name: "Support", dependencies: ["App"], path: "Tests/Support"),
            .testTarget(name: "AppTests", dependencies: ["App", "Support"]),
            """)
        #expect(targets == [
            ManifestTarget(name: "CLib", kind: .systemLibrary, dependencies: [], path: nil),
            ManifestTarget(name: "Wrapper", kind: .target, dependencies: ["CLib"], path: nil),
            ManifestTarget(name: "App", kind: .target, dependencies: ["Wrapper", "Base"], path: nil),
            ManifestTarget(name: "Support", kind: .target, dependencies: ["App"], path: "Tests/Support"),
            ManifestTarget(name: "AppTests", kind: .testTarget, dependencies: ["App", "Support"], path: nil),
        ])
    }

    @Test func checker_reportsSameFloorHigherFloorCImportsAndUnplacedTargets() {
        let map = parseFloorMap("""
            ## The modules as floors

            Exception: `Tool` → `CMore`.

            | floor | modules | imported by | what |
            |---|---|---|---|
            | 0. C libraries | `CLib`, `CMore` | the wrappers only | C |
            | 1. base | `Base`, `Other` | any floor above | plain |
            | 2. wrappers | `Wrapper`, `Second` | any floor above | C handles |
            | 3. services | `Service`, `Tool` | any floor above | rules |
            | 4. tests | every `.testTarget` | any floor above | tests |

            ## Next section
            | 9. ignored | `Service` | any floor above | not the floor table |
            """)
        func target(_ name: String, _ dependencies: [String], _ kind: ManifestTarget.Kind = .target) -> ManifestTarget {
            ManifestTarget(name: name, kind: kind, dependencies: dependencies, path: nil)
        }
        let clean = [
            target("CLib", [], .systemLibrary), target("CMore", [], .systemLibrary), target("Base", []), target("Other", []),
            target("Wrapper", ["CLib", "Base"]), target("Second", []), target("Service", ["Wrapper", "Base"]),
            target("Tool", ["CMore"]), target("ServiceTests", ["Service", "Tool"], .testTarget),
        ]
        #expect(floorViolations(clean, map) == [])

        var broken = clean
        broken[3].dependencies = ["Base"]                        // same floor
        broken[4].dependencies = ["CLib", "Service"]             // higher floor
        broken[6].dependencies = ["CLib"]                        // a C module above the wrappers, and a second importer
        broken.append(target("Stray", []))                       // on no floor
        #expect(floorViolations(broken, map) == [
            "CLib is imported by Service, Wrapper: one wrapper each",
            "Other (floor 1) depends on Base (floor 1): not a lower floor",
            "Service depends on CLib, which only the wrappers may import",
            "Stray is in Package.swift but on no floor",
            "Wrapper (floor 2) depends on Service (floor 3): not a lower floor",
        ])
    }
}
