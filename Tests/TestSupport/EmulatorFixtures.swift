import FCMEmulator
import HTTPServer

extension TLSFixtures {
    /// The FCM + OAuth emulator's configuration: served over TLS with this suite's server certificate (which
    /// `caFile` trusts), accepting token assertions signed by the private half of `assertionPublicKeyPEM`.
    public func emulatorConfiguration(assertionPublicKeyPEM: String) -> FCMEmulator.Configuration {
        FCMEmulator.Configuration(assertionPublicKeyPEM: assertionPublicKeyPEM,
                                  tls: TLSIdentity(certificatePEM: serverCertificatePEM, privateKeyPEM: serverKeyPEM))
    }
}
