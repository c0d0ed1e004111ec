//! A key's text as reports show it: its `Display`, cut at [`KEY_TEXT_MAX`] bytes, held
//! inline (no allocation).

use std::fmt::{self, Write};

/// The most bytes of a key's text kept for statistics and listener events; longer
/// texts are cut at a character boundary and end with `…`.
pub const KEY_TEXT_MAX: usize = 30;

/// A key's text, cut to [`KEY_TEXT_MAX`] bytes, inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyText {
    len: u8,
    cut: bool,
    bytes: [u8; KEY_TEXT_MAX],
}

impl KeyText {
    pub(crate) const EMPTY: KeyText = KeyText {
        len: 0,
        cut: false,
        bytes: [0; KEY_TEXT_MAX],
    };

    /// The text of `key`, cut.
    pub(crate) fn of(key: &(impl fmt::Display + ?Sized)) -> KeyText {
        let mut t = KeyText::EMPTY;
        // The writer never fails: a full text only sets `cut`.
        let _ = write!(t, "{key}");
        t
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only whole characters are ever copied in (see `write_str`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }

    /// The text, with `…` when it was cut.
    pub(crate) fn to_display(self) -> String {
        let mut s = self.as_str().to_owned();
        if self.cut {
            s.push('…');
        }
        s
    }
}

impl Write for KeyText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut {
            return Ok(());
        }
        let free = KEY_TEXT_MAX - usize::from(self.len);
        let mut take = s.len().min(free);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        let at = usize::from(self.len);
        self.bytes[at..at + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take as u8;
        if take < s.len() {
            self.cut = true;
        }
        Ok(())
    }
}

/// The text with `…` when it was cut; `KeyText::of` a shown text gives it back.
impl fmt::Display for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.cut {
            f.write_char('…')?;
        }
        Ok(())
    }
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_display(), f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_kept_and_long_ones_cut_at_a_character() {
        assert_eq!(KeyText::of("vip-42").to_display(), "vip-42");
        assert_eq!(KeyText::of(&42u64).to_display(), "42");
        let long = "é".repeat(40);
        let t = KeyText::of(long.as_str());
        assert_eq!(t.as_str(), "é".repeat(15));
        assert!(t.to_display().ends_with('…'));
        assert_eq!(KeyText::of(&"x".repeat(30)).to_display(), "x".repeat(30));
    }

    #[test]
    fn a_shown_text_is_shown_the_same_again() {
        // Copied by an async call that waits (`WaitingKey`), then shown from the copy.
        for text in [
            String::new(),
            "vip-42".to_owned(),
            "x".repeat(30),
            "x".repeat(31),
            "é".repeat(40),
            format!("{}{}", "x".repeat(27), "😀"),
            format!("{}{}", "x".repeat(26), "😀😀"),
        ] {
            let once = KeyText::of(text.as_str());
            assert_eq!(KeyText::of(&once).to_display(), once.to_display(), "{text}");
        }
    }
}
