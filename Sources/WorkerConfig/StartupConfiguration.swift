import AppStore
import Crypto
import FCM
import FoundationEssentials
import HTTP
import TextSupport

/// Everything `run` loads before it touches anything: the settings from the environment, the FCM service account and
/// the App Store key and root certificates. `run` and `check-config` both load through `check`, so they cannot
/// disagree about what is a bad setting (issue 32).
public struct StartupConfiguration: Sendable {
    public var configuration: Configuration
    /// The parsed `FCM_SERVICE_ACCOUNT_FILE`.
    public var serviceAccount: ServiceAccount
    /// The App Store key and roots; nil when the `APPSTORE_*` settings are absent (re-checks off).
    public var appStore: AppStoreConfiguration?
    /// Variables that look like a misspelt setting; they change nothing, `run` logs them and `check-config` prints them.
    public var warnings: [SettingNames.NearMiss]

    /// Loads and checks everything; throws every bad setting at once (exit 78).
    public static func load(from environment: [String: String]) throws(ConfigurationErrors) -> StartupConfiguration {
        let result = check(environment)
        guard let loaded = result.loaded else { throw ConfigurationErrors(result.errors) }
        return loaded
    }

    /// What one pass over the environment and the credential files found: the loaded parts, every problem, the warnings.
    public struct Check: Sendable {
        /// The settings; a bad one holds its default, so this is only the effective configuration when `errors` is empty.
        public var configuration: Configuration
        public var serviceAccount: ServiceAccount?
        public var appStore: AppStoreConfiguration?
        public var warnings: [SettingNames.NearMiss]
        /// Every problem, each naming its variable; the same variable may appear more than once (several bad fields).
        public var errors: [ConfigurationError]

        /// The configuration `run` would start with; nil when anything is wrong.
        public var loaded: StartupConfiguration? {
            guard errors.isEmpty, let serviceAccount else { return nil }
            return StartupConfiguration(configuration: configuration, serviceAccount: serviceAccount, appStore: appStore, warnings: warnings)
        }
    }

    /// Reads the environment and every credential file it names, collecting every problem instead of stopping at the first.
    public static func check(_ environment: [String: String]) -> Check {
        let (configuration, found) = Configuration.read(from: environment)
        var errors = found
        // A variable whose value is already wrong (unset, no such file) has its one error; its file is not read.
        let failed = Set(errors.map(\.variable))

        var serviceAccount: ServiceAccount?
        let accountPath = configuration.fcmServiceAccountFile
        if !failed.contains("FCM_SERVICE_ACCOUNT_FILE"), !accountPath.isEmpty {
            switch BoundedFile.read(accountPath, limit: ServiceAccount.maxFileBytes) {
            case .success(let bytes):
                switch ServiceAccount.check(Data(bytes), source: accountPath) {
                case .success(let account): serviceAccount = account
                case .failure(let problems):
                    errors += problems.errors.map { ConfigurationError("FCM_SERVICE_ACCOUNT_FILE", $0.message) }
                }
            case .failure(let failure):
                errors.append(ConfigurationError("FCM_SERVICE_ACCOUNT_FILE",
                                                 failure.problem(accountPath, typical: ServiceAccount.typicalFileSize)))
            }
        }

        var appStore: AppStoreConfiguration?
        if let settings = configuration.appStore {
            var key: PrivateKey?
            if !failed.contains("APPSTORE_PRIVATE_KEY_FILE") {
                switch appStoreKey(settings.privateKeyFile) {
                case .success(let loaded): key = loaded
                case .failure(let error): errors.append(error)
                }
            }
            var roots: [Certificate] = []
            if !failed.contains("APPSTORE_ROOT_CERT_FILES") {
                for path in settings.rootCertificateFiles {
                    switch BoundedFile.read(path, limit: maxCertificateFileBytes) {
                    case .success(let bytes):
                        if let root = try? Certificate(pemOrDER: bytes) {
                            roots.append(root)
                        } else {
                            errors.append(ConfigurationError("APPSTORE_ROOT_CERT_FILES", "\(path) is not a PEM or DER X.509 certificate"))
                        }
                    case .failure(let failure):
                        errors.append(ConfigurationError("APPSTORE_ROOT_CERT_FILES",
                                                         failure.problem(path, typical: "an Apple root certificate is about 1 KB")))
                    }
                }
            }
            if let key, roots.count == settings.rootCertificateFiles.count {
                appStore = appStoreConfiguration(settings, key: key, roots: roots, configuration: configuration)
            }
        }
        return Check(configuration: configuration, serviceAccount: serviceAccount, appStore: appStore,
                     warnings: SettingNames.nearMisses(in: environment), errors: errors)
    }

    /// The most of an App Store `.p8` key read into memory; the key is about 250 bytes.
    public static let maxKeyFileBytes = 64 * 1024
    /// The most of one `APPSTORE_ROOT_CERT_FILES` certificate read into memory; Apple's roots are about 1 KB.
    public static let maxCertificateFileBytes = 1024 * 1024

    /// The `.p8`: a PEM EC private key on P-256 (ES256); the error says which of those it is not, never what it holds.
    static func appStoreKey(_ path: String) -> Result<PrivateKey, ConfigurationError> {
        let name = "APPSTORE_PRIVATE_KEY_FILE"
        let bytes: [UInt8]
        switch BoundedFile.read(path, limit: maxKeyFileBytes) {
        case .success(let read): bytes = read
        case .failure(let failure):
            return .failure(ConfigurationError(name, failure.problem(path, typical: "an App Store .p8 key is about 250 bytes")))
        }
        guard let key = try? PrivateKey(pem: String(decoding: bytes, as: UTF8.self)) else {
            return .failure(ConfigurationError(name, "\(path) is not a PEM private key (expected the App Store .p8, an EC P-256 key)"))
        }
        guard key.isEC else {
            return .failure(ConfigurationError(name, "\(path) is \(key.isRSA ? "an RSA" : "not an EC") key; the App Store .p8 is an EC P-256 key"))
        }
        guard key.isP256 else {
            return .failure(ConfigurationError(name, "\(path) is an EC key on another curve; the App Store .p8 is an EC P-256 key"))
        }
        return .success(key)
    }

    /// The App Store client's settings from the loaded key and roots.
    static func appStoreConfiguration(_ settings: Configuration.AppStore, key: PrivateKey, roots: [Certificate],
                                      configuration: Configuration) -> AppStoreConfiguration {
        var appStore = AppStoreConfiguration(issuerId: settings.issuerId, keyId: settings.keyId, bundleId: settings.bundleId,
                                             privateKey: key, roots: roots, productionURL: settings.productionURL,
                                             sandboxURL: settings.sandboxURL, recheckInterval: configuration.entitlementRecheckInterval,
                                             http: HTTPClientConfiguration(maxInFlight: 8, caFile: configuration.tlsCAFile))
        appStore.setRequestsPerSecond(Double(settings.requestsPerSecond))
        appStore.notificationHistory = settings.notificationHistory
        appStore.notificationPollInterval = settings.notificationPollInterval
        return appStore
    }
}
