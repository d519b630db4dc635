import Testing

@Test func placeholder_OutboxTests() { #expect(1 + 1 == 2) }
