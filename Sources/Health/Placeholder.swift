/// Placeholder until the module lands.
enum HealthPlaceholder {}
