/// Placeholder until the module lands.
enum SchemaPlaceholder {}
