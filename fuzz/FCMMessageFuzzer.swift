// libFuzzer entry point for the FCM message builder: any display name (the API's data) and any event fields give
// a body of at most 4,096 bytes that is valid JSON, with the name whole or cut at a grapheme boundary ending in "…".
import JSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFCMMessage(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // The first byte picks a repeat count, so short inputs can still reach the size limit; the rest splits in two.
    let repeats = bytes.first.map { Int($0) % 64 + 1 } ?? 1
    let rest = bytes.dropFirst()
    let cut = rest.startIndex + rest.count / 2
    let name = String(repeating: String(decoding: rest[rest.startIndex..<cut], as: UTF8.self), count: repeats)
    let group = String(decoding: rest[cut...], as: UTF8.self)
    let push = DoseTakenPush(token: "tok", eventKey: "doseTaken:" + group, patientId: "p1", displayName: name, date: "2026-02-11",
                             slot: "morning", recordingGroupId: group, withinTime: repeats % 2 == 0, expiration: 1_770_000_000)
    let body = FCMMessage.json(for: push)
    precondition(body.count <= FCMMessage.maxBodyBytes, "body of \(body.count) bytes")
    guard let json = JSONValue.parse(bytes: body) else { fatalError("the body is not JSON") }
    guard let sent = json["message"]?["notification"]?["body"]?.stringValue else { fatalError("no notification body") }
    if !sent.hasPrefix(name) {
        // Shortened: a grapheme-cluster prefix of the name, then the ellipsis.
        guard let range = sent.firstRange(of: FCMMessage.ellipsis) else { fatalError("a shortened name without …") }
        let kept = sent[..<range.lowerBound]
        precondition(name.hasPrefix(kept) && name.count > kept.count, "not a whole-character prefix of the name")
    }
    return 0
}
