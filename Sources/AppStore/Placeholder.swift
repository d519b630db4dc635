/// Placeholder until the module lands.
enum AppStorePlaceholder {}
