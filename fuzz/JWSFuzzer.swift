// libFuzzer entry point for the signed-transaction (JWS + x5c) verifier: attacker-controlled input
// must be refused, never crash, never verify without a trusted root.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJWS(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let verifier = SignedTransactionVerifier(roots: [])
    let expectation = SignedTransactionVerifier.Expectation(bundleId: "b", productId: "p", originalTransactionId: "1", environment: "Production")
    if (try? verifier.verify(text, expecting: expectation)) != nil { fatalError("verified without any trusted root") }
    return 0
}
