/// Placeholder until the module lands.
enum HTTPServerPlaceholder {}
