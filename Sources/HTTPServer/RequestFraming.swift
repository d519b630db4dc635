/// How a request's body is framed, judged from its headers alone, before a byte of the body is read: the one place
/// where a server refuses a body it would not keep. Every server applies it; only the cap differs
/// (`HTTPServerOptions.maxBodyBytes`: 0 for the health endpoint, which takes no body).
enum RequestFraming {
    /// The answer for a request whose headers announce a body the server will not read, or frame it ambiguously;
    /// nil when the body (if any) may be read, up to `maxBodyBytes`.
    ///
    /// More than one `Content-Length` or `Transfer-Encoding`, or both at once, is refused (400): the server and a
    /// proxy in front of it could each pick a different one (libmicrohttpd reads the first `Content-Length`, a
    /// dictionary keeps the last), the request smuggling of RFC 9112 §6.3. A body over the cap, or any
    /// `Transfer-Encoding` where no body is taken, is refused (413) without reading it.
    static func refusal(headers: [(name: String, value: String)], maxBodyBytes: Int) -> HTTPServerResponse? {
        let lengths = headers.filter { $0.name == "content-length" }.map(\.value)
        let encodings = headers.filter { $0.name == "transfer-encoding" }.map(\.value)
        guard lengths.count <= 1, encodings.count <= 1, lengths.isEmpty || encodings.isEmpty else {
            return refuse(400, "a request may carry one Content-Length or one Transfer-Encoding, not several")
        }
        if let length = lengths.first {
            guard let bytes = contentLength(length) else { return refuse(400, "Content-Length is not a number") }
            if bytes > maxBodyBytes { return refuse(413, tooLarge(maxBodyBytes)) }
        }
        if !encodings.isEmpty, maxBodyBytes == 0 { return refuse(413, tooLarge(maxBodyBytes)) }
        return nil
    }

    /// The answer for a body that grew past the cap while it was read (a chunked upload).
    static func bodyTooLarge(_ maxBodyBytes: Int) -> HTTPServerResponse { refuse(413, tooLarge(maxBodyBytes)) }

    /// A `Content-Length` value as a byte count: digits only (no sign, no list); a value too large for `Int` counts as
    /// `Int.max` (over any cap, not a parse error).
    static func contentLength(_ text: String) -> Int? {
        let digits = text.utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }
        guard !digits.isEmpty, digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(String(decoding: digits.reversed(), as: UTF8.self)) ?? Int.max
    }

    private static func tooLarge(_ maxBodyBytes: Int) -> String {
        maxBodyBytes == 0 ? "a request body is not accepted" : "a request body is accepted up to \(maxBodyBytes) bytes"
    }

    /// A JSON refusal that closes the connection: what is left of the body is never read.
    private static func refuse(_ status: Int, _ message: String) -> HTTPServerResponse {
        .json(status, #"{"error":"\#(message)"}"#, headers: ["Connection": "close"])
    }
}
