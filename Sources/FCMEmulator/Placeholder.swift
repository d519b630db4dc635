/// Placeholder until the module lands.
enum FCMEmulatorPlaceholder {}
