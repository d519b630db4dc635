// libFuzzer entry point for the JSON reader and writer (module JSON): every outbox payload, FCM and OAuth answer,
// App Store answer and JWS part goes through the reader.
import JSON

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard let value = JSONValue.parse(bytes: UnsafeBufferPointer(start: data, count: size)) else { return 0 }
    // What the writer writes, the reader reads back as the same value.
    let text = value.serialized
    guard let again = JSONValue.parse(text) else { fatalError("the writer wrote what the reader refuses: \(text)") }
    guard again == value else { fatalError("a round trip changed the value: \(text)") }
    return 0
}
