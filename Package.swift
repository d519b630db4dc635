// swift-tools-version:6.0
import PackageDescription

/// medication-worker: PostgreSQL outbox → FCM pushes, App Store entitlement re-checks.
/// No package dependencies: only the toolchain and Debian's C libraries via module maps.
let package = Package(
    name: "medication-worker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "medication-worker", targets: ["medication-worker"]),
        .executable(name: "fcm-emulator", targets: ["fcm-emulator"]),
    ],
    targets: [
        // C libraries (one module map each; shim.h holds typed wrappers for variadic calls).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(name: "CMalloc"),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),

        // Wrapper modules: the only importers of their C library; they own the handles.
        .target(name: "Postgres", dependencies: ["CLibPQ", "Threads", "Timekeeping", "TextSupport"]),
        .target(name: "HTTP", dependencies: ["CCurl", "Crypto", "Threads", "Timekeeping", "ErrorCodes", "TextSupport"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD"]),
        .target(name: "Crypto", dependencies: ["COpenSSL", "ErrorCodes"]),
        .target(name: "Systemd", dependencies: ["CSystemd"]),

        // OS threads, for the wrappers whose loops block in C (libpq's socket wait, curl_multi_poll).
        .target(name: "Threads"),

        // Domain modules: plain, safe Swift.
        // Durations, backoff, civil dates, timestamp reading, a blocking sleep.
        .target(name: "Timekeeping"),
        // `ErrorCode<Family>` and `CodedError`: the shape of every module's error struct.
        .target(name: "ErrorCodes"),
        // Foundation-free string helpers: trimming whitespace, zero padding, fixed decimals; `Printable`, the one escaping
        // of every logged or printed value, and the command line's stdout and stderr; `BoundedFile`, a file read whole up
        // to a cap (the credential and certificate files).
        .target(name: "TextSupport"),
        .target(name: "JSON"),
        // The push contract between the engine and whatever sends: DoseTakenPush, SendOutcome, PushSender.
        .target(name: "Push"),
        .target(name: "Lifecycle"),
        .target(name: "Logging", dependencies: ["Systemd", "TextSupport"]),
        .target(name: "Schema", dependencies: ["Postgres", "Timekeeping"]),
        .target(name: "Metrics"),
        .target(name: "FCM", dependencies: ["HTTP", "Crypto", "JSON", "Push", "Logging", "Metrics", "Timekeeping", "ErrorCodes", "TextSupport"]),
        .target(name: "AppStore", dependencies: ["HTTP", "Crypto", "JSON", "Postgres", "Logging", "Metrics", "Lifecycle", "Timekeeping"]),
        .target(name: "Outbox", dependencies: ["Postgres", "Push", "JSON", "Logging", "Metrics", "Lifecycle", "Timekeeping"]),
        .target(name: "Health", dependencies: ["HTTPServer", "JSON", "Metrics", "Lifecycle", "CMalloc"]),
        // The environment and the credential files it names, read and checked once: `run` and `check-config` load alike.
        .target(name: "WorkerConfig", dependencies: ["Logging", "Timekeeping", "TextSupport", "Crypto", "HTTP", "FCM", "AppStore", "Postgres"]),
        // The operator commands (status, event, events, redrive, resend, devices, check-config, migrate): one file each,
        // its queries beside it; each returns one report value rendered as text or `--json`.
        .target(name: "OperatorCommands", dependencies: [
            "Postgres", "Schema", "HTTP", "Crypto", "JSON", "Logging", "Metrics", "WorkerConfig", "FCM", "AppStore", "Outbox", "Timekeeping", "TextSupport",
        ]),
        .target(name: "WorkerApp", dependencies: [
            "Postgres", "Schema", "HTTP", "Crypto", "Systemd", "Logging", "Metrics", "WorkerConfig",
            "FCM", "AppStore", "Outbox", "Health", "Lifecycle", "Timekeeping", "TextSupport", "OperatorCommands",
        ]),
        .executableTarget(name: "medication-worker", dependencies: ["WorkerApp"]),

        // The loopback FCM + Google OAuth emulator (tests, demo, benchmark).
        .target(name: "FCMEmulator", dependencies: ["HTTPServer", "Crypto", "Timekeeping"]),
        .executableTarget(name: "fcm-emulator", dependencies: ["FCMEmulator", "HTTPServer"]),
        // The FCM sender alone, for scripts/bench-sender.
        .executableTarget(name: "fcm-sender-bench", dependencies: ["FCM", "Push", "HTTP", "Logging", "Metrics", "Timekeeping"]),
        // The pipeline's own statements as a pgbench script and the claim alone, for bench/run and scripts/claim-plan.
        .target(name: "OutboxBench", dependencies: ["Outbox", "Postgres"]),
        .executableTarget(name: "outbox-bench", dependencies: ["OutboxBench"]),

        // Tests.
        .target(name: "TestSupport", dependencies: ["Postgres", "Schema", "Outbox", "Logging", "FCMEmulator", "HTTPServer"], path: "Tests/TestSupport"),
        // docs/architecture.md's module floors, checked against this file and the sources' imports.
        .testTarget(name: "ArchitectureTests"),
        .testTarget(name: "JSONTests", dependencies: ["JSON"]),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "Schema", "Outbox", "TestSupport"]),
        .testTarget(name: "WorkerConfigTests", dependencies: ["Push", "WorkerConfig", "WorkerApp", "TestSupport"]),
        .testTarget(name: "FCMTests", dependencies: ["Push", "FCM", "FCMEmulator", "HTTP", "HTTPServer", "Crypto", "JSON", "Logging", "Metrics", "CCurl", "TestSupport"]),
        .testTarget(name: "AppStoreTests", dependencies: ["Push", "AppStore", "OperatorCommands", "Outbox", "Lifecycle", "HTTP", "HTTPServer", "Crypto", "Postgres", "WorkerApp", "FCMEmulator", "Logging", "Metrics", "WorkerConfig", "TestSupport"]),
        .testTarget(name: "HealthTests", dependencies: ["Health", "HTTP", "Metrics", "TestSupport"]),
        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "HTTPServer", "CCurl", "FCM", "FCMEmulator", "Push", "Logging", "Metrics", "TestSupport"]),
        .testTarget(name: "LoggingTests", dependencies: ["Logging", "TextSupport", "Health", "HTTPServer", "Metrics", "TestSupport"]),
        .testTarget(name: "TimekeepingTests", dependencies: ["Timekeeping"]),
        .testTarget(name: "TextSupportTests", dependencies: ["TextSupport"]),
        .testTarget(name: "WorkerAppTests", dependencies: ["WorkerApp", "Outbox", "TextSupport", "FCMEmulator", "HTTP", "HTTPServer", "Postgres", "Schema", "TestSupport"]),
        .testTarget(name: "OperatorCommandsTests", dependencies: ["OperatorCommands", "TextSupport", "Outbox", "Postgres", "JSON", "WorkerApp", "FCMEmulator", "TestSupport"]),
        // Pure tests (no PostgreSQL, no servers): `swift test --filter 'OutboxUnitTests|FCMUnitTests'` runs them alone.
        .testTarget(name: "OutboxUnitTests", dependencies: ["Outbox", "OutboxBench", "FCM", "Push", "Timekeeping"]),
        .testTarget(name: "FCMUnitTests", dependencies: ["FCM", "Push", "JSON"]),
        .testTarget(name: "OutboxTests", dependencies: ["OperatorCommands", "OutboxBench", "JSON", "Push", "Outbox", "Lifecycle", "Timekeeping", "FCM", "FCMEmulator", "HTTP", "HTTPServer", "WorkerApp", "Postgres", "Logging", "Metrics", "Schema", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
