/// Placeholder until the module lands.
enum SystemdPlaceholder {}
