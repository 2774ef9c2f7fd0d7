//! Text a guest supplied (the URIs it asked for, its log lines, its answers),
//! cut before the host keeps it or writes it to its log: one string from a
//! guest may be megabytes, and neither the host's log nor its error messages
//! may carry that.

use std::borrow::Cow;

/// The most of one guest-supplied string the host keeps in an error or a
/// log field.
pub const KEPT_BYTES: usize = 512;

/// `text` cut to at most `max` bytes (at a character boundary), saying at
/// its end how many bytes were cut.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}... ({} bytes cut)",
        &text[..end],
        text.len() - end
    ))
}

/// [`cut`] at [`KEPT_BYTES`], owned: for the fields of errors.
pub fn kept(text: &str) -> String {
    cut(text, KEPT_BYTES).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole_and_long_text_cut_at_a_character() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("0123456789", 10), "0123456789");
        assert_eq!(cut("0123456789ab", 10), "0123456789... (2 bytes cut)");
        // "é" is two bytes: the cut falls before it rather than inside it.
        assert_eq!(cut("aaaaé", 5), "aaaa... (2 bytes cut)");
        let megabyte = kept(&"x".repeat(1 << 20));
        assert_eq!(
            megabyte,
            format!(
                "{}... ({} bytes cut)",
                "x".repeat(KEPT_BYTES),
                (1 << 20) - KEPT_BYTES
            )
        );
    }
}
