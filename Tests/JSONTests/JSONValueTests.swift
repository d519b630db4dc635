import JSON
import Testing

@Suite("JSON reader and writer")
struct JSONValueTests {
    @Test func scalarsAndContainers_keepJSONsOwnTypes() {
        #expect(JSONValue.parse(#"{"a": [1, 2.5, -0.25e2, true, false, null, "x"], "b": {}}"#) == .object([
            "a": .array([.number(1), .number(2.5), .number(-25), .bool(true), .bool(false), .null, .string("x")]),
            "b": .object([:]),
        ]))
        // A true is never a 1, a "1" never a number.
        #expect(JSONValue.parse("true")?.intValue == nil)
        #expect(JSONValue.parse(#""1""#)?.numberValue == nil)
        #expect(JSONValue.parse("1")?.boolValue == nil)
        #expect(JSONValue.parse(" \n\t[ ]\r\n ") == .array([]))
    }

    @Test func escapes_areDecoded_andSurrogatePairsJoined() {
        #expect(JSONValue.parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{8}\u{C}\n\r\t"))
        #expect(JSONValue.parse(#""\u00e9\u670d""#) == .string("é服"))
        #expect(JSONValue.parse(#""\ud83d\udc8a""#) == .string("💊"))
        #expect(JSONValue.parse(#""💊 raw UTF-8""#) == .string("💊 raw UTF-8"))
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "[,1]", #"{"a":1,}"#, #"{"a" 1}"#, #"{a: 1}"#, "'x'", #""unterminated"#,
        "01", "1.", ".5", "-", "1e", "1e+", "+1", "NaN", "Infinity", "tru", "nul", "[1] 2",
        #""\x""#, #""\u12""#, #""\ud83d""#, #""\udc8a""#, #""\ud83d\u0041""#, "\"tab\tinside\"", "\"nl\ninside\"",
        "222222222222222222222E2222222222", "-1e400",  // beyond Double: would be infinity (found by scripts/fuzz)
    ])
    func malformedInput_isRefused(_ text: String) {
        #expect(JSONValue.parse(text) == nil)
    }

    @Test func nesting_isBounded_soNoInputExhaustsTheStack() {
        #expect(JSONValue.parse(String(repeating: "[", count: 60) + String(repeating: "]", count: 60)) != nil)
        #expect(JSONValue.parse(String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)) == nil)
    }

    @Test func numbers_readAsDoubles_wholeOnesAsInts() {
        #expect(JSONValue.parse("4040010")?.intValue == 4_040_010)
        #expect(JSONValue.parse("1.5")?.intValue == nil)
        #expect(JSONValue.parse("1e3")?.intValue == 1000)
        #expect(JSONValue.parse("-0")?.numberValue == 0)
        #expect(JSONValue.parse("1.7976931348623157e308")?.numberValue == .greatestFiniteMagnitude)
    }

    @Test func accessors_answerNilForOtherShapes() {
        let value = JSONValue.parse(#"{"error": {"code": 404, "details": [{"@type": "t"}]}}"#)
        #expect(value?["error"]?["code"]?.intValue == 404)
        #expect(value?["error"]?["details"]?.arrayValue?.first?["@type"]?.stringValue == "t")
        #expect(value?["missing"] == nil)
        #expect(value?["error"]?["code"]?["deeper"] == nil)
        #expect(JSONValue.parse("[1]")?["key"] == nil)
    }

    @Test func writer_sortsKeys_escapesWhatJSONRequires_andReadsBackTheSameValue() {
        let value = JSONValue.object(["b": .array([.number(1), .number(0.5), .null]), "a": .string("q\"\\\n\u{1}/é💊"),
                                      "c": .bool(false), "d": .number(1_700_000_000_000)])
        #expect(value.serialized == #"{"a":"q\"\\\n\u0001/é💊","b":[1,0.5,null],"c":false,"d":1700000000000}"#)
        #expect(JSONValue.parse(value.serialized) == value)
        #expect(JSONValue.quoted("a/b") == #""a/b""#)
    }
}
