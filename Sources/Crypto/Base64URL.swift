import FoundationEssentials

/// base64url without padding (RFC 7515 §2), as JWS/JWT use it.
public enum Base64URL {
    /// Encodes bytes as unpadded base64url.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        Data(bytes).base64EncodedString()
            .replacing("+", with: "-")
            .replacing("/", with: "_")
            .replacing("=", with: "")
    }

    /// Decodes unpadded (or padded) base64url; nil when the text is not base64url.
    public static func decode(_ text: some StringProtocol) -> Data? {
        var base64 = String(text)
            .replacing("-", with: "+")
            .replacing("_", with: "/")
        guard !base64.contains("="), base64.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "/") }) else {
            return text.hasSuffix("=") ? Data(base64Encoded: String(text)) : nil
        }
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
