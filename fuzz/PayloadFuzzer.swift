// libFuzzer entry point for the outbox payload decoder (untrusted input written by the web API).
// Built by scripts/fuzz together with the decoder's sources.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPayload(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let event = try? DoseTakenEvent.parse(eventType: "DOSE_TAKEN", patientId: "p1", payload: text) {
        // Properties a valid event must have, whatever the input.
        precondition(event.eventKey.hasPrefix("doseTaken:"))
        precondition(DoseTakenEvent.slots.contains(event.slot))
        precondition(event.date.utf8.count == 10)
    }
    return 0
}
