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

/// Seeds the API's tables and enqueues events exactly as the web API does.
struct Fixtures {
    let connection: PostgresConnection

    init(_ conninfo: String) throws { connection = try PostgresConnection(conninfo: conninfo) }

    func patient(_ id: String, name: String = "山田花子") throws {
        try connection.query(#"INSERT INTO "Patient" (id, "displayName") VALUES (\#(id), \#(name))"#)
    }

    func link(caregiver: String, patient: String, status: String = "ACTIVE") throws {
        try connection.query(#"""
            INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES (\#(UUID().uuidString), \#(caregiver), \#(patient), \#(status))
            """#)
    }

    @discardableResult
    func device(owner: String, token: String, enabled: Bool = true, id: String = UUID().uuidString) throws -> String {
        try connection.query("""
            INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, platform, environment, "isEnabled", "lastSeenAt")
            VALUES (\(id), 'CAREGIVER', \(owner), \(token), 'ios', 'PROD', \(enabled), now() - interval '1 day')
            """)
        return id
    }

    /// Patient `p1` with caregiver `c1` (ACTIVE link) and one enabled device per token.
    func caredForPatient(tokens: [String]) throws {
        try patient("p1")
        try link(caregiver: "c1", patient: "p1")
        for token in tokens { try device(owner: "c1", token: token) }
    }

    /// The web API's documented enqueue statement.
    @discardableResult
    func enqueue(patient: String, payload: String, eventType: String = "DOSE_TAKEN") throws -> Int64 {
        Int64(try connection.query("""
            INSERT INTO "PushOutbox" ("eventType", "patientId", payload) VALUES (\(eventType), \(patient), \(payload)::jsonb) RETURNING id
            """)[0]["id"].int())
    }

    /// `patients` patients, each cared for by one caregiver with `devices` devices, and `events` DOSE_TAKEN events spread over them.
    func caredForPatients(_ patients: Int, devicesEach devices: Int, events: Int) throws {
        try connection.query(#"INSERT INTO "Patient" (id, "displayName") SELECT 'p' || g, 'name' || g FROM generate_series(1, \#(patients)::int) g"#)
        try connection.query(#"""
            INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status)
            SELECT 'l' || g, 'c' || g, 'p' || g, 'ACTIVE' FROM generate_series(1, \#(patients)::int) g
            """#)
        try connection.query(#"""
            INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token, "isEnabled", "lastSeenAt")
            SELECT 'd' || g || '-' || k, 'CAREGIVER', 'c' || g, 'tok-' || g || '-' || k, true, now()
            FROM generate_series(1, \#(patients)::int) g, generate_series(1, \#(devices)::int) k
            """#)
        try connection.query(#"""
            INSERT INTO "PushOutbox" ("eventType", "patientId", payload)
            SELECT 'DOSE_TAKEN', 'p' || (1 + g % \#(patients)::int), jsonb_build_object('date', '2026-02-11', 'slot', 'morning',
                'recordingGroupId', 'group-' || g, 'withinTime', true, 'isPrn', false, 'takenAt', '2026-02-11T08:03:27+09:00')
            FROM generate_series(1, \#(events)::int) g
            """#)
    }

    static func payload(date: String = "2026-02-11", slot: String = "morning", group: String? = "group-1",
                        withinTime: Bool = true, takenAt: String = "2026-02-11T08:03:27+09:00") -> String {
        let groupJSON = group.map { "\"\($0)\"" } ?? "null"
        return #"{"date":"\#(date)","slot":"\#(slot)","recordingGroupId":\#(groupJSON),"withinTime":\#(withinTime),"isPrn":false,"takenAt":"\#(takenAt)"}"#
    }

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
/// once, after `delay`, or, when `held`, only once `open()` is called (`cancelInFlight` answers the held ones with a
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
    let delay: Duration?
    let onStart: @Sendable (DoseTakenPush) -> Void

    init(answer: @escaping @Sendable (DoseTakenPush) -> SendOutcome = { .sent(messageName: "projects/p/messages/\($0.token)") },
         held: Bool = false, delay: Duration? = nil, onStart: @escaping @Sendable (DoseTakenPush) -> Void = { _ in }) {
        state = Mutex(State(open: !held))
        self.delay = delay
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
        guard let delay else { return reply(push, completion) }
        Task {
            try? await Task.sleep(for: delay)
            reply(push, completion)
        }
    }

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

/// A real `FCMSender` against the loopback emulator over TLS, torn down on every path. `knownGood`: the database whose
/// newest SENT deliveries a disabling answer's dry run goes to, as the daemon wires it (nil: none known).
func withEmulatorSender(maxInFlight: Int = 20, knownGood conninfo: String? = nil, onHealth: @escaping @Sendable (FCMHealth) -> Void = { _ in },
                        configure: (inout FCMConfiguration) -> Void = { _ in },
                        _ body: (FCMSender, FCMEmulator) async throws -> Void) async throws {
    let fixtures = TLSFixtures.shared
    let keys = try fixtures.rsaKeyPair()
    var configuration = fixtures.emulatorConfiguration(assertionPublicKeyPEM: keys.publicPEM)
    configuration.clientEmail = "worker@test-project.iam.gserviceaccount.com"
    let emulator = try FCMEmulator(configuration: configuration)
    defer { emulator.stop() }
    let file = try fixtures.serviceAccountFile(privateKeyPEM: keys.privatePEM, tokenURI: emulator.tokenURI)
    var fcm = FCMConfiguration(serviceAccount: try ServiceAccount.load(path: file), baseURL: emulator.baseURL,
                               http: HTTPClientConfiguration(maxInFlight: maxInFlight, caFile: fixtures.caFile))
    if let conninfo { fcm.knownGoodTokens = knownGoodTokens(conninfo) }
    configure(&fcm)
    let sender = try FCMSender(
        configuration: fcm,
        logger: Logger(label: "fcm", sink: MemorySink()), metrics: MetricsRegistry(), onHealth: onHealth)
    defer { sender.shutdown() }
    try await body(sender, emulator)
}
