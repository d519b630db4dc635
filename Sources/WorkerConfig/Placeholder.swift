/// Placeholder until the module lands.
enum WorkerConfigPlaceholder {}
