//! Text a guest hands the host — log lines, reasons, messages — made safe to
//! keep and print: control characters escaped (a newline cannot forge a log
//! line) and the length capped, with the cut marked as such.

use std::fmt::Write as _;

/// `text` with control characters escaped and at most about `max` bytes
/// kept; a cut is marked with how many bytes were left out.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 32);
    for (at, c) in text.char_indices() {
        if out.len() >= max {
            let _ = write!(out, "… [{} more bytes cut]", text.len() - at);
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Replaces `text` with its [`bounded`] form.
pub(crate) fn bound(text: &mut String, max: usize) {
    if text.len() > max || text.contains(char::is_control) {
        *text = bounded(text, max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(bounded("a\nb\r\u{1b}[31mc", 100), "a\\nb\\r\\u{1b}[31mc");
        assert_eq!(bounded("plain ünïcode", 100), "plain ünïcode");
    }

    #[test]
    fn long_text_is_cut_and_says_so() {
        let long = "é".repeat(1000);
        let cut = bounded(&long, 11);
        assert_eq!(cut, format!("{}… [1988 more bytes cut]", "é".repeat(6)));
        let mut kept = "short".to_owned();
        bound(&mut kept, 5);
        assert_eq!(kept, "short");
    }
}
