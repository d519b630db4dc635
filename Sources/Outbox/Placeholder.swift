/// Placeholder until the module lands.
enum OutboxPlaceholder {}
