import Testing

@Test func placeholder_WorkerConfigTests() { #expect(1 + 1 == 2) }
