import Testing

@Test func placeholder_PostgresTests() { #expect(1 + 1 == 2) }
