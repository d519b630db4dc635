import Foundation
import Testing
import TextSupport

/// `Printable`: the one escaping of every logged or printed value (issue 54).
@Suite("Printable: values escaped for a terminal")
struct PrintableTests {
    @Test func escaped_C0_DEL_andC1_comeOutVisible() {
        #expect(Printable.escaped("\u{1B}[2J") == #"\u{1B}[2J"#)
        #expect(Printable.escaped("\u{1B}]0;title\u{7}") == #"\u{1B}]0;title\u{7}"#)
        #expect(Printable.escaped("a\rb\nc\td") == #"a\rb\nc\td"#)
        #expect(Printable.escaped("\u{0}\u{8}\u{1F}") == #"\u{0}\u{8}\u{1F}"#)
        #expect(Printable.escaped("x\u{7F}y") == #"x\u{7F}y"#)
        // C1: NEL, CSI (a terminal may take U+009B as ESC [), OSC, ST.
        #expect(Printable.escaped("\u{80}\u{85}\u{9B}2J\u{9D}\u{9C}\u{9F}") == #"\u{80}\u{85}\u{9B}2J\u{9D}\u{9C}\u{9F}"#)
        // Text that hides or reorders what follows: line and paragraph separators, bidirectional overrides.
        #expect(Printable.escaped("ok\u{2028}\u{2029}\u{202E}gpj.exe") == #"ok\u{2028}\u{2029}\u{202E}gpj.exe"#)
    }

    @Test func escaped_keepsMultiByteUTF8JapaneseAndBackslashes() {
        for kept in ["plain text: ok", "服薬記録", "山田花子さんが薬を服用しました", "é e\u{301} ü 🙂 👨‍👩‍👧", #"C:\path\u{1B}"#, "\u{A0}\u{A9}", ""] {
            #expect(Printable.escaped(kept) == kept)
            #expect(!Printable.needsEscaping(kept))
        }
        #expect(Printable.escaped("服薬\u{1B}記録") == #"服薬\u{1B}記録"#)
    }

    @Test func escaped_leavesNoControlCharacter_andIsIdempotent() {
        let hostile = String(decoding: (0...0x7F as ClosedRange<UInt8>).map { $0 }, as: UTF8.self) + "\u{80}\u{9F}\u{85}\u{2028}\u{200F}"
        let once = Printable.escaped(hostile)
        #expect(!once.unicodeScalars.contains { Printable.isUnsafe($0) })
        #expect(!once.utf8.contains { $0 < 0x20 || $0 == 0x7F })
        #expect(Printable.escaped(once) == once)
    }

    @Test func lines_keepsLineBreaks_escapesEverythingElse() {
        #expect(Printable.lines("one\ntwo\r\n\u{1B}[31mthree") == "one\ntwo\\r\n\\u{1B}[31mthree")
        #expect(Printable.lines("report\n  服薬記録\n") == "report\n  服薬記録\n")
    }

    @Test func json_escapesWhatATerminalWouldAct_on_andStaysTheSameJSON() throws {
        let document = "{\"k\":\"a\u{7F}b\u{9B}c\u{2028}d\u{202E}服\"}"
        let safe = Printable.json(document)
        #expect(safe == #"{"k":"a\u007fb\u009bc\u2028d\u202e服"}"#)
        let decoded = try JSONSerialization.jsonObject(with: Data(safe.utf8)) as? [String: String]
        #expect(decoded == ["k": "a\u{7F}b\u{9B}c\u{2028}d\u{202E}服"])
        // The whitespace JSON allows between tokens stays as it is.
        #expect(Printable.json("{\n\t\"k\": 1\r\n}") == "{\n\t\"k\": 1\r\n}")
    }
}
