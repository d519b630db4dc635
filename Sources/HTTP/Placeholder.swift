/// Placeholder until the module lands.
enum HTTPPlaceholder {}
