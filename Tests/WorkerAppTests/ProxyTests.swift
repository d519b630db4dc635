import FCMEmulator
import Foundation
import HTTP
import Outbox
import Postgres
import TestSupport
import Testing

/// An operator's egress proxy, as the daemon reads it from its environment (`HTTPS_PROXY`, `NO_PROXY`): the real
/// binary, tinyproxy as the proxy, the emulator (OAuth and FCM over TLS) behind it.
@Suite("Egress proxy", .serialized, .blockingFixtures)
struct ProxyTests {
    static let token = "fcm-token-proxy-" + String(repeating: "P", count: 24)

    static func seed(_ db: PostgresClient) async throws {
        try await db.query(#"INSERT INTO "Patient" (id, "displayName") VALUES ('p1', 'Proxy')"#)
        try await db.query(#"INSERT INTO "CaregiverPatientLink" (id, "caregiverId", "patientId", status) VALUES ('l1', 'c1', 'p1', \#(literal: LinkStatus.active))"#)
        try await db.query(#"INSERT INTO "PushDevice" (id, "ownerType", "ownerId", token) VALUES ('d1', \#(literal: OwnerType.caregiver), 'c1', \#(token))"#)
    }

    static func enqueue(_ db: PostgresClient) async throws {
        try await db.query(Fixtures.enqueueQuery(patient: "p1", payload: Fixtures.noonPayload(group: "g-proxy")))
    }

    /// Starts the daemon with `environment` added, enqueues one event, and returns once it is DONE and the emulator
    /// has its push (the daemon stopped, with status 0). Returns the emulator's `host:port` and the daemon's log.
    @discardableResult
    static func deliverOne(_ conninfo: String, environment: [String: String]) async throws -> (emulator: String, log: String) {
        let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
        try await seed(db)
        let rig = try DaemonTests.Rig(databaseURL: conninfo, extra: environment)
        defer { rig.stop() }
        #expect(try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20).contains { $0.contains("READY=1") })
        try await enqueue(db)
        try await eventually("the event is DONE", timeout: .seconds(15), every: .milliseconds(100)) {
            try await db.query(#"SELECT bool_and(status = \#(literal: OutboxStatus.done)) AS ok FROM "PushOutbox""#)[0]["ok"].bool()
        }
        #expect(rig.emulator.receivedMessages.map(\.token) == [token])
        #expect(await rig.terminate() == 0)
        return (String(rig.emulator.baseURL.dropFirst("https://".count)), rig.log)
    }

    /// `HTTPS_PROXY=http://…`: the token request and the send both go through the proxy's CONNECT tunnel, TLS to the
    /// emulator verified end to end, and nothing goes around it.
    @Test func httpsProxy_theTokenAndTheSendGoThroughItsTunnel() async throws {
        guard Tinyproxy.binary != nil else { Issue.record("tinyproxy is not installed (CI installs it)"); return }
        try await TestDatabase.withMigratedDatabase { conninfo in
            let proxy = try await Tinyproxy(basicAuth: ("egress", "s3cret"))
            defer { proxy.stop() }
            // The proxy requires its user and password: the start is logged with the proxy, the password hidden.
            let url = "http://egress:s3cret@127.0.0.1:\(proxy.port)"
            let (emulator, log) = try await Self.deliverOne(conninfo, environment: ["HTTPS_PROXY": url])
            #expect(log.contains("https.proxy=\"http://egress:***@127.0.0.1:\(proxy.port) (HTTPS_PROXY)\"") && !log.contains("s3cret"), "\(log)")
            // Every tunnel went to the emulator (it serves the token endpoint and FCM on one port).
            let tunnels = proxy.tunnels
            #expect(!tunnels.isEmpty && tunnels.allSatisfy { $0 == emulator }, "tunnels: \(tunnels), emulator at \(emulator)")
        }
    }

    /// `HTTPS_PROXY=https://…`: TLS to the proxy itself (stunnel in front of tinyproxy, its certificate from the CA that
    /// `TLS_CA_FILE` adds), and inside it the CONNECT tunnel with TLS of its own to the emulator. The token request and
    /// the send both arrive, so TLS inside TLS runs on libcurl's own reads and writes, and the proxy's certificate is
    /// verified against the same trust as the servers' (the system's and `TLS_CA_FILE`).
    @Test func tlsProxy_theTunnelRunsInsideTLSToTheProxy() async throws {
        guard Tinyproxy.binary != nil, Stunnel.binary != nil else {
            Issue.record("tinyproxy or stunnel4 is not installed (CI installs both)"); return
        }
        try await TestDatabase.withMigratedDatabase { conninfo in
            let proxy = try await Tinyproxy()
            defer { proxy.stop() }
            let front = try await Stunnel(forwardingTo: proxy.port)
            defer { front.stop() }
            let (emulator, log) = try await Self.deliverOne(conninfo, environment: ["HTTPS_PROXY": front.url])
            #expect(log.contains("https.proxy=\"\(front.url) (HTTPS_PROXY)\""), "\(log)")
            #expect(front.connectionsAccepted > 0)
            let tunnels = proxy.tunnels
            #expect(!tunnels.isEmpty && tunnels.allSatisfy { $0 == emulator }, "tunnels: \(tunnels), emulator at \(emulator)")
        }
    }

    /// `NO_PROXY` names the emulator's host: the daemon goes direct, and the proxy (up, and usable) is never asked.
    @Test func noProxy_hostsGoDirect() async throws {
        guard Tinyproxy.binary != nil else { Issue.record("tinyproxy is not installed (CI installs it)"); return }
        try await TestDatabase.withMigratedDatabase { conninfo in
            let proxy = try await Tinyproxy()
            defer { proxy.stop() }
            try await Self.deliverOne(conninfo, environment: ["HTTPS_PROXY": proxy.url, "NO_PROXY": "localhost,127.0.0.1"])
            #expect(proxy.tunnels.isEmpty, "tunnels: \(proxy.tunnels)")
        }
    }

    /// The proxy's password changed and `HTTPS_PROXY` still has the old one: the proxy refuses the tunnel. Nothing
    /// is sent or blamed on a device, and `/readyz` says the proxy refused it.
    @Test func proxyRefusingTheCredentials_isNamedAsTheProxy() async throws {
        guard Tinyproxy.binary != nil else { Issue.record("tinyproxy is not installed (CI installs it)"); return }
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
            try await Self.seed(db)
            let proxy = try await Tinyproxy(basicAuth: ("egress", "rotated"))
            defer { proxy.stop() }
            let rig = try DaemonTests.Rig(databaseURL: conninfo, extra: ["HTTPS_PROXY": "http://egress:s3cret@127.0.0.1:\(proxy.port)"])
            defer { rig.stop() }
            #expect(try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20).contains { $0.contains("READY=1") })
            try await Self.enqueue(db)
            try await eventually("/readyz says the proxy refused the tunnel", timeout: .seconds(10), every: .milliseconds(200)) {
                let readyz = try await rig.get("/readyz")
                let body = String(decoding: readyz.body, as: UTF8.self)
                return readyz.status == 503 && body.contains("CONNECT tunnel failed, response 401 (the proxy, from HTTPS_PROXY)")
            }
            try await eventually("the delivery waits for a token", timeout: .seconds(10), every: .milliseconds(200)) {
                try await db.query(#"SELECT count(*) = 1 AS ok FROM "PushDelivery" WHERE status = \#(literal: DeliveryStatus.pending) AND "lastError" = 'OAUTH_TOKEN_UNAVAILABLE'"#)[0]["ok"].bool()
            }
            #expect(try await db.query(#"SELECT bool_and("isEnabled") AS ok FROM "PushDevice""#)[0]["ok"].bool())
            #expect(rig.emulator.receivedMessages.isEmpty)
            #expect(!rig.log.contains("s3cret"))
            #expect(await rig.terminate() == 0)
        }
    }

    /// The proxy is down: nothing can be sent. The event waits (no device disabled, nothing dead) and the operator
    /// is told what to look at.
    @Test func proxyDown_eventsWait_andTheOperatorIsToldWhy() async throws {
        try await TestDatabase.withMigratedDatabase { conninfo in
            let db = PostgresClient(conninfo: conninfo, maxConnections: 1)
            try await Self.seed(db)
            let closed = FreePort.next()
            let rig = try DaemonTests.Rig(databaseURL: conninfo, extra: ["HTTPS_PROXY": "http://127.0.0.1:\(closed)"])
            defer { rig.stop() }
            let startup = try await rig.notify.read(until: { $0.contains("READY=1") }, seconds: 20)
            try await Self.enqueue(db)
            #expect(startup.contains { $0.contains("READY=1") })
            // The token request cannot reach the proxy: credentials not ready, naming the proxy; sending paused.
            try await eventually("/readyz names the proxy", timeout: .seconds(10), every: .milliseconds(200)) {
                let readyz = try await rig.get("/readyz")
                let body = String(decoding: readyz.body, as: UTF8.self)
                return readyz.status == 503 && body.contains(#""fcm_credentials":"down: "#)
                    && body.contains("port \(closed)") && body.contains("(the proxy, from HTTPS_PROXY)")
            }
            try await Task.sleep(for: .seconds(2))
            // Nothing is lost or blamed on the device: the delivery waits, the device stays enabled.
            let rows = try await db.query(#"SELECT o.status AS event, d.status AS delivery, d."lastError" AS error, v."isEnabled" AS enabled FROM "PushOutbox" o, "PushDelivery" d, "PushDevice" v"#)
            #expect(rows.count == 1)
            #expect(try rows[0]["event"].string() == "PENDING" && rows[0]["delivery"].string() == "PENDING")
            #expect(try rows[0]["error"].string() == "OAUTH_TOKEN_UNAVAILABLE" && rows[0]["enabled"].bool())
            #expect(rig.log.contains("(the proxy, from HTTPS_PROXY)"))
            #expect(rig.emulator.receivedMessages.isEmpty)
            #expect(await rig.terminate() == 0)
        }
    }
}
