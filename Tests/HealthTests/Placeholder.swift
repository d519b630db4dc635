import Testing

@Test func placeholder_HealthTests() { #expect(1 + 1 == 2) }
