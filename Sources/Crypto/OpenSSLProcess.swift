import COpenSSL

/// OpenSSL's process-wide state.
public enum OpenSSLProcess {
    /// Keeps OpenSSL's global state (its locks, its error and random-number tables) until the process is gone.
    ///
    /// By default an `atexit` handler frees it while other threads may still be inside OpenSSL (libcurl, libpq, a token
    /// being signed), which crashed a stop (docs/benchmark.md, "Issue 24, fourth round"). Only the first initialisation of
    /// OpenSSL in a process decides this, so this must run before anything else uses OpenSSL, libcurl or libpq.
    public static func keepStateUntilExit() {
        _ = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil)
    }
}
