// libFuzzer entry point for the FCM message builder: any display name (the API's data) and any event fields give
// a body of at most 4,096 bytes that is valid JSON, with the name whole or cut at a grapheme boundary ending in "…".
import JSON
import Push

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
    // Compared by scalars: a name ending in a prepended mark (U+0600) joins the next character of the body into one
    // grapheme, so the body's characters need not start with the name's (scripts/fuzz found this in its own check).
    if !sent.unicodeScalars.starts(with: name.unicodeScalars) {
        // Shortened: whole characters of the name, then the ellipsis.
        let scalars = Array(sent.unicodeScalars)
        guard let ellipsis = scalars.firstIndex(of: "…") else { fatalError("a shortened name without …") }
        let kept = Array(scalars[..<ellipsis])
        var whole: [Unicode.Scalar] = []
        for character in name where whole.count < kept.count { whole += character.unicodeScalars }
        precondition(whole == kept, "not whole characters of the name")
    }
    return 0
}
