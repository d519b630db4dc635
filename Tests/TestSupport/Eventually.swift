import Testing

/// Polls `condition` every `interval` until it holds, for at most `timeout`: the one way tests wait for something that
/// happens on another task or thread. When it never holds, records an issue at the caller ("timed out after 30 s
/// waiting until <description>") and returns false, so the test still reaches its cleanup (stopping what it started).
@discardableResult
public func eventually(
    _ description: String, timeout: Duration = .seconds(10), every interval: Duration = .milliseconds(20),
    sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async throws -> Bool
) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while clock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: interval)
    }
    if try await condition() { return true }
    Issue.record("timed out after \(timeout) waiting until \(description)", sourceLocation: sourceLocation)
    return false
}
