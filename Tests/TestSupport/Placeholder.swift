/// Shared test helpers.
public enum TestSupportPlaceholder {}
