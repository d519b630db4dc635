import Testing

@Test func placeholder_FCMTests() { #expect(1 + 1 == 2) }
