/// Placeholder until the module lands.
enum CryptoPlaceholder {}
