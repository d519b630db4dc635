import Testing

@Test func placeholder_AppStoreTests() { #expect(1 + 1 == 2) }
