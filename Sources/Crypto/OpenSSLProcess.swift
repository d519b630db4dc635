import COpenSSL

/// OpenSSL's process-wide state.
public enum OpenSSLProcess {
    /// Keeps OpenSSL's global state (its locks, its error and random-number tables) until the process is gone.
    ///
    /// By default OpenSSL frees that state from an `atexit` handler, and `exit` runs it while other threads may still be
    /// inside OpenSSL: libcurl closing a connection, libpq, a token being signed. Such a thread then takes a lock that
    /// was freed (seen here: a SIGTERM right after READY=1 ended in SIGSEGV, in `pthread_rwlock_unlock` on a null lock,
    /// instead of exit 0). Only the first initialisation of OpenSSL in a process decides this, so this must run before
    /// anything else uses OpenSSL, libcurl or libpq. The kernel frees the memory at exit anyway.
    public static func keepStateUntilExit() {
        _ = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil)
    }
}
