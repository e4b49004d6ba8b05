//! Compact JSON text of a `serde_json::Value`, byte for byte what `serde_json::to_vec`
//! writes, but with strings copied in runs: serde_json looks every byte of a string up in
//! its escape table, which for an object with a large string value (a ConfigMap's data, a
//! certificate) is most of the cost of writing it. Here eight bytes are checked at once and
//! runs without anything to escape are copied whole.

use serde_json::Value;

/// `value` as compact JSON.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(&mut out, value);
    out
}

/// Appends `value` as compact JSON to `out`.
pub fn write(out: &mut Vec<u8>, value: &Value) {
    // No value nests `usize::MAX` deep: the whole value is written.
    write_within(out, value, usize::MAX);
}

/// Appends `value` as compact JSON to `out`, as [`write`] does, if it nests no deeper than
/// `levels` objects and arrays; `false` (with part of it written) if it nests deeper, as
/// `registry::object::deeper_than` would say. A stored object's depth limit is checked in
/// the walk that writes it, not in one more.
pub fn write_within(out: &mut Vec<u8>, value: &Value, levels: usize) -> bool {
    match value {
        Value::Array(items) => {
            if levels == 0 {
                return false;
            }
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if !write_within(out, item, levels - 1) {
                    return false;
                }
            }
            out.push(b']');
            true
        }
        Value::Object(map) => {
            if levels == 0 {
                return false;
            }
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                if !write_within(out, item, levels - 1) {
                    return false;
                }
            }
            out.push(b'}');
            true
        }
        Value::Null => {
            out.extend_from_slice(b"null");
            true
        }
        Value::Bool(true) => {
            out.extend_from_slice(b"true");
            true
        }
        Value::Bool(false) => {
            out.extend_from_slice(b"false");
            true
        }
        // Numbers as serde_json writes them (itoa, ryu): rare enough to leave to it.
        Value::Number(number) => {
            let _ = serde_json::to_writer(&mut *out, number);
            true
        }
        Value::String(text) => {
            write_str(out, text);
            true
        }
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The bytes of the eight in `word` (little-endian) that must be escaped — a control
/// character (below 0x20), `"` or `\` — as their high bits. The lowest one set is exact
/// (a borrow can only mark bytes above a true one), which is all the scan needs.
#[inline(always)]
fn escapes(word: u64) -> u64 {
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    ((word.wrapping_sub(ONES * 0x20) & !word)
        | (quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash))
        & HIGHS
}

/// The little-endian word of the eight bytes at `at`.
#[inline(always)]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The index of the first byte from `from` that must be escaped, or the length.
#[inline(always)]
fn next_escape(bytes: &[u8], mut from: usize) -> usize {
    // Sixteen bytes a step while they are clean, then eight.
    while from + 16 <= bytes.len() {
        if escapes(word(bytes, from)) | escapes(word(bytes, from + 8)) != 0 {
            break;
        }
        from += 16;
    }
    while from + 8 <= bytes.len() {
        let found = escapes(word(bytes, from));
        if found != 0 {
            return from + (found.trailing_zeros() / 8) as usize;
        }
        from += 8;
    }
    while from < bytes.len() && !matches!(bytes[from], 0..0x20 | b'"' | b'\\') {
        from += 1;
    }
    from
}

/// Appends `text` as a JSON string, escaped as serde_json escapes it.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut at = 0;
    loop {
        let next = next_escape(bytes, at);
        out.extend_from_slice(&bytes[at..next]);
        let Some(&byte) = bytes.get(next) else {
            break;
        };
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]),
        }
        at = next + 1;
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn same(value: &Value) {
        assert_eq!(
            String::from_utf8(to_vec(value)).unwrap(),
            serde_json::to_string(value).unwrap()
        );
    }

    #[test]
    fn writes_what_serde_json_writes() {
        same(&json!(null));
        same(&json!({}));
        same(&json!([]));
        same(
            &json!({"a": [1, -2, 3.5, 1e300, -0.0, 0.1, u64::MAX, i64::MIN], "b": {"c": null, "d": true, "e": false}}),
        );
        same(&json!("x".repeat(1024)));
        same(&json!(
            "quote \" backslash \\ slash / tab \t nl \n cr \r bs \u{8} ff \u{c} nul \u{0} us \u{1f} del \u{7f}"
        ));
        same(&json!({"ключ \"κλειδί\"": "値 \u{1F600} \u{2028}", "\u{0}\u{1}": "end\\"}));
        // Escapes at every position of an eight-byte chunk, and at the ends.
        for at in 0..20 {
            let mut text = "abcdefghijklmnopqrst".to_owned();
            text.insert(at, '"');
            same(&json!(text));
            text.insert(at, '\u{3}');
            same(&json!(text));
        }
    }

    /// `[[…[x]…]]`, `levels` arrays deep, or objects `{"a":…}` when `objects`.
    fn nested(levels: usize, objects: bool) -> Value {
        (0..levels).fold(json!("x"), |inner, _| match objects {
            true => json!({"a": inner, "b": 1}),
            false => json!([1, inner]),
        })
    }

    #[test]
    fn writing_within_a_depth_writes_what_write_writes_or_says_it_is_deeper() {
        for objects in [false, true] {
            for levels in 0..6 {
                let value = nested(levels, objects);
                for limit in 0..8 {
                    let mut out = Vec::new();
                    let within = write_within(&mut out, &value, limit);
                    assert_eq!(
                        within,
                        !crate::registry::object::deeper_than(&value, limit),
                        "{value} within {limit}"
                    );
                    if within {
                        assert_eq!(out, to_vec(&value));
                    }
                }
            }
        }
        let mut out = Vec::new();
        assert!(!write_within(&mut out, &json!({}), 0));
        assert!(write_within(&mut out, &json!(3), 0));
    }

    proptest! {
        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(text in "(?s).{0,64}", bytes in proptest::collection::vec(0u8..0x80, 0..64)) {
            same(&json!(text));
            let ascii = String::from_utf8(bytes).unwrap();
            same(&json!({ascii.clone(): [ascii]}));
        }
    }
}
