/// A runtime start failure (exit 1), e.g. the health address is in use.
struct DaemonStartError: Error, CustomStringConvertible {
    /// What could not be started, and why.
    var message: String
    var description: String { message }
}
