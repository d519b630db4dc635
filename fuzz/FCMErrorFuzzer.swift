// libFuzzer entry point for the FCM response classifier (bytes from the network).
import Foundation
import Push

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFCMError(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let status = size > 0 ? [200, 400, 401, 403, 404, 429, 500, 503][Int(bytes[0]) % 8] : 400
    let body = Array(bytes.dropFirst())
    let result = FCMResponseClassifier.classify(status: status, headers: ["retry-after": String(decoding: body.prefix(40), as: UTF8.self)],
                                                body: body, now: Date(timeIntervalSince1970: 1_700_000_000))
    // Whatever the body, a 5xx must never be a dead token (that would disable a healthy device).
    if status >= 500, case .outcome(.tokenInvalid) = result { fatalError("5xx classified as a dead token") }
    _ = FCMResponseClassifier.GoogleError.parse(body)
    return 0
}
