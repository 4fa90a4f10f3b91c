//! Inputs made from a kept sample, for property tests of parsers
//! (`testing::untrusted`, the metrics port's connections): the sample with a few random edits —
//! bytes flipped, a run cut out, bytes inserted, a number swapped for an
//! extreme one, the end cut off — so most cases are nearly valid and reach
//! past the first check, where arbitrary bytes would not.

use proptest::prelude::*;

/// One edit, its position taken modulo the sample's length.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Cut(usize, usize),
    Insert(usize, Vec<u8>),
    Number(usize, &'static str),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let extreme = prop::sample::select(vec![
        "0",
        "-1",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999",
        "1e308",
        "NaN",
        "-0",
        "",
    ]);
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Edit::Flip(at, byte)),
        (any::<usize>(), 0usize..64).prop_map(|(at, len)| Edit::Cut(at, len)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(at, bytes)| Edit::Insert(at, bytes)),
        (any::<usize>(), extreme).prop_map(|(at, number)| Edit::Number(at, number)),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(sample: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut bytes = sample.to_vec();
    for edit in edits {
        let at = |i: usize| if bytes.is_empty() { 0 } else { i % bytes.len() };
        match edit {
            Edit::Flip(i, byte) => {
                let i = at(*i);
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= byte | 1;
                }
            }
            Edit::Cut(i, len) => {
                let i = at(*i);
                let end = (i + len).min(bytes.len());
                bytes.drain(i..end);
            }
            Edit::Insert(i, new) => {
                let i = at(*i);
                bytes.splice(i..i, new.iter().copied());
            }
            Edit::Number(i, number) => {
                // The run of digits at or after the position.
                let start = (at(*i)..bytes.len()).find(|&j| bytes[j].is_ascii_digit());
                if let Some(start) = start {
                    let end = (start..bytes.len())
                        .find(|&j| !bytes[j].is_ascii_digit())
                        .unwrap_or(bytes.len());
                    bytes.splice(start..end, number.bytes());
                }
            }
            Edit::Truncate(i) => bytes.truncate(at(*i)),
        }
    }
    bytes
}

/// `sample` with one to four edits, or (one case in eight) arbitrary bytes.
pub(crate) fn mutated(sample: impl Into<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let sample = sample.into();
    prop_oneof![
        7 => prop::collection::vec(edit(), 1..4).prop_map(move |edits| apply(&sample, &edits)),
        1 => prop::collection::vec(any::<u8>(), 0..512),
    ]
}

/// As [`mutated`], as text (invalid UTF-8 replaced).
pub(crate) fn mutated_text(sample: impl Into<Vec<u8>>) -> impl Strategy<Value = String> {
    mutated(sample).prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}
