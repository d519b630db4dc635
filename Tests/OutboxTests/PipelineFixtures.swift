import FCM
import FCMEmulator
import Foundation
import HTTP
import HTTPServer
import Logging
import Metrics
import Outbox
import Postgres
import Push
import Synchronization
import TestSupport

extension Fixtures {
    func eventStatus(_ id: Int64) throws -> (status: OutboxStatus, attempts: Int, lastError: String?) {
        let row = try connection.query(#"SELECT status, attempts, "lastError" FROM "PushOutbox" WHERE id = \#(id)"#)[0]
        return (try row["status"].decode(OutboxStatus.self), try row["attempts"].int(), row["lastError"].optionalString())
    }

    func deliveries() throws -> [(key: String, device: String, status: DeliveryStatus, messageId: String?)] {
        try connection.query(#"SELECT "eventKey", "pushDeviceId", status, "fcmMessageId" FROM "PushDelivery" ORDER BY "eventKey", "pushDeviceId""#)
            .map { (try $0["eventKey"].string(), try $0["pushDeviceId"].string(), try $0["status"].decode(DeliveryStatus.self), $0["fcmMessageId"].optionalString()) }
    }
}

/// The pipeline tests' one fake FCM. Each push is answered with `answer` (SENT, named by its token, by default): at
/// once, after `delay` (changed mid-run by `setDelay`), or, when `held`, only once `open()` is called (`cancelInFlight` answers the held ones with a
/// transport retry, as a stop's deadline does). `onStart` sees each push as it is handed over; `pushes` are the pushes
/// answered so far, in the order they were answered.
final class FakeSender: PushSender, Sendable {
    private struct State {
        var open: Bool
        var held: [(push: DoseTakenPush, completion: @Sendable (SendOutcome) -> Void)] = []
    }

    private let state: Mutex<State>
    private let answered = Recorder<DoseTakenPush>()
    let answer: @Sendable (DoseTakenPush) -> SendOutcome
    /// How long each push waits for its answer; `setDelay` changes it for the pushes that start afterwards.
    private let delay: Mutex<Duration?>
    let onStart: @Sendable (DoseTakenPush) -> Void

    init(answer: @escaping @Sendable (DoseTakenPush) -> SendOutcome = { .sent(messageName: "projects/p/messages/\($0.token)") },
         held: Bool = false, delay: Duration? = nil, onStart: @escaping @Sendable (DoseTakenPush) -> Void = { _ in }) {
        state = Mutex(State(open: !held))
        self.delay = Mutex(delay)
        self.onStart = onStart
        self.answer = answer
    }

    var pushes: [DoseTakenPush] { answered.all }

    func start(_ push: DoseTakenPush, completion: @escaping @Sendable (SendOutcome) -> Void) {
        onStart(push)
        let now = state.withLock { state -> Bool in
            if !state.open { state.held.append((push, completion)) }
            return state.open
        }
        guard now else { return }
        guard let delay = delay.withLock({ $0 }) else { return reply(push, completion) }
        Task {
            try? await Task.sleep(for: delay)
            reply(push, completion)
        }
    }

    /// FCM's answer time from now on (nil: at once).
    func setDelay(_ delay: Duration?) { self.delay.withLock { $0 = delay } }

    /// Answers the held pushes, and every later one at once.
    func open() {
        let held = state.withLock { state in
            state.open = true
            defer { state.held.removeAll() }
            return state.held
        }
        for item in held { reply(item.push, item.completion) }
    }

    func cancelWaiting() {}

    func cancelInFlight() {
        let held = state.withLock { state in
            defer { state.held.removeAll() }
            return state.held
        }
        for item in held { item.completion(.retry(reason: "TRANSPORT_CANCELLED", after: nil, minimumBackoff: nil)) }
    }

    private func reply(_ push: DoseTakenPush, _ completion: @Sendable (SendOutcome) -> Void) {
        answered.record(push)
        completion(answer(push))
    }
}

/// A worker with test-friendly settings.
func makeWorker(_ conninfo: String, sender: any PushSender, configure: (inout DeliveryEngineConfiguration) -> Void = { _ in })
    -> (DeliveryEngine, MetricsRegistry, MemorySink) {
    var configuration = DeliveryEngineConfiguration()
    configuration.pollInterval = .milliseconds(50)
    configure(&configuration)
    let sink = MemorySink()
    let metrics = MetricsRegistry()
    let worker = DeliveryEngine(client: PostgresClient(conninfo: conninfo), sender: sender, configuration: configuration,
                              logger: Logger(label: "outbox", logLevel: .debug, sink: sink), metrics: metrics)
    return (worker, metrics, sink)
}

/// The witness's known-good tokens from the database at `conninfo`, as the daemon wires them (Daemon+Build).
func knownGoodTokens(_ conninfo: String) -> @Sendable ([String]) async -> WitnessCandidates? {
    let known = KnownGoodTokens(client: PostgresClient(conninfo: conninfo))
    return { suspects in
        await known.newest(excluding: suspects).map {
            WitnessCandidates(tokens: $0.tokens, unwitnessedAllowanceLeft: $0.unwitnessedDisables < OutboxStore.unwitnessedDisableCap)
        }
    }
}

/// The loopback FCM emulator over TLS and a service-account file it accepts, torn down on every path: `body` gets the
/// emulator and the FCM configuration that reaches it.
func withEmulator(maxInFlight: Int = 20, _ body: (FCMEmulator, FCMConfiguration) async throws -> Void) async throws {
    let fixtures = TLSFixtures.shared
    let keys = try fixtures.rsaKeyPair()
    var configuration = fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM)
    configuration.clientEmail = "worker@test-project.iam.gserviceaccount.com"
    let emulator = try FCMEmulator(configuration: configuration)
    defer { emulator.stop() }
    let file = try fixtures.serviceAccountFile(privateKeyPEM: keys.privatePEM, tokenURI: emulator.tokenURI)
    try await body(emulator, FCMConfiguration(serviceAccount: try ServiceAccount.load(path: file), baseURL: emulator.baseURL,
                                              http: HTTPClientConfiguration(maxInFlight: maxInFlight, caFile: fixtures.caFile)))
}

/// A real `FCMSender` against the loopback emulator over TLS, torn down on every path. `knownGood`: the database whose
/// newest SENT deliveries a disabling answer's dry run goes to, as the daemon wires it (nil: none known).
func withEmulatorSender(maxInFlight: Int = 20, knownGood conninfo: String? = nil, onHealth: @escaping @Sendable (FCMHealth) -> Void = { _ in },
                        configure: (inout FCMConfiguration) -> Void = { _ in },
                        _ body: (FCMSender, FCMEmulator) async throws -> Void) async throws {
    try await withEmulator(maxInFlight: maxInFlight) { emulator, fcm in
        var fcm = fcm
        if let conninfo { fcm.knownGoodTokens = knownGoodTokens(conninfo) }
        configure(&fcm)
        let sender = try FCMSender(configuration: fcm, logger: Logger(label: "fcm", sink: MemorySink()), metrics: MetricsRegistry(),
                                   onHealth: onHealth)
        defer { sender.shutdown() }
        try await body(sender, emulator)
    }
}
