//! Text handling of the MCP tools, kept apart from the API calls so it can
//! be tested alone: line ranges and byte caps of `read`, the binary test,
//! the exact replacement of `edit`, and the capped output of `exec`.

/// Bytes looked at for a NUL byte to call a file binary: the node agent's
/// grep skips files whose first 8 KiB hold one, and `read` agrees with it.
pub(crate) const BINARY_PROBE_BYTES: usize = 8192;

/// Whether `data` (the start of a file, `complete` when it is all of it) is
/// binary: a NUL byte in its first 8 KiB, or bytes that are not UTF-8
/// (a multi-byte character cut by the end of an incomplete read is not
/// counted).
pub(crate) fn is_binary(data: &[u8], complete: bool) -> bool {
    if data[..data.len().min(BINARY_PROBE_BYTES)].contains(&0) {
        return true;
    }
    match std::str::from_utf8(data) {
        Ok(_) => false,
        // `error_len` is None when the input ended inside a character.
        Err(e) => complete || e.error_len().is_some(),
    }
}

/// A range of lines taken out of a text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Lines {
    /// The lines, each with its newline (the last one may lack it).
    pub text: String,
    /// Number (1-based) of the first line in `text`.
    pub first: usize,
    /// Number of the last line in `text` (`first - 1` when there is none).
    pub last: usize,
    /// Lines in the whole text.
    pub total: usize,
    /// True when `max_bytes` cut the range: `text` ends before line `end`.
    pub cut: bool,
}

/// Lines `start..=end` (1-based, `end` past the last line meaning to the
/// end) of `text`, then at most `max_bytes` of them: whole lines while they
/// fit, and when not even the first fits, its start cut at a character
/// boundary.
pub(crate) fn select_lines(text: &str, start: usize, end: usize, max_bytes: usize) -> Lines {
    let start = start.max(1);
    let total = text.split_inclusive('\n').count();
    let mut out = String::new();
    let mut last = start - 1;
    let mut cut = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let n = i + 1;
        if n < start {
            continue;
        }
        if n > end {
            break;
        }
        if out.len() + line.len() > max_bytes {
            cut = true;
            if out.is_empty() {
                let mut at = max_bytes.min(line.len());
                while !line.is_char_boundary(at) {
                    at -= 1;
                }
                out.push_str(&line[..at]);
            }
            break;
        }
        out.push_str(line);
        last = n;
    }
    Lines {
        text: out,
        first: start,
        last,
        total,
        cut,
    }
}

/// Why an edit was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EditRefusal {
    /// `old` is empty, or the same as `new`.
    Pointless(&'static str),
    /// `old` does not occur.
    NotFound,
    /// `old` occurs this many times (more than once) without `replace_all`.
    Ambiguous(usize),
}

/// `content` with `old` replaced by `new`: the single occurrence, or every
/// one with `all`. Returns the new text and the number of replacements.
pub(crate) fn replace_exact(
    content: &str,
    old: &str,
    new: &str,
    all: bool,
) -> Result<(String, usize), EditRefusal> {
    if old.is_empty() {
        return Err(EditRefusal::Pointless("old_string is empty"));
    }
    if old == new {
        return Err(EditRefusal::Pointless(
            "old_string and new_string are the same",
        ));
    }
    let count = content.matches(old).count();
    match count {
        0 => Err(EditRefusal::NotFound),
        1 => Ok((content.replacen(old, new, 1), 1)),
        n if all => Ok((content.replace(old, new), n)),
        n => Err(EditRefusal::Ambiguous(n)),
    }
}

/// One output stream of a run, kept within a cap: all of it when it fits,
/// else its first and last halves around a marker saying how much was left
/// out (the end of a log is often where the error is).
#[derive(Debug)]
pub(crate) struct Capped {
    cap: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
    total: u64,
}

impl Capped {
    /// Keeps at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Capped {
        Capped {
            cap,
            head: Vec::new(),
            tail: Vec::new(),
            total: 0,
        }
    }

    /// Adds `data` to the stream.
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let half = self.cap / 2;
        if self.head.len() < half {
            let n = (half - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        self.tail.extend_from_slice(data);
        let keep = self.cap - half;
        // Trim in batches: amortised O(1) per byte.
        if self.tail.len() > keep.saturating_mul(2).max(4096) {
            self.tail.drain(..self.tail.len() - keep);
        }
    }

    /// Bytes of the stream that are not kept.
    pub(crate) fn omitted(&self) -> u64 {
        let keep = self.cap - self.cap / 2;
        let tail = self.tail.len().min(keep);
        self.total - self.head.len() as u64 - tail as u64
    }

    /// The kept text (invalid UTF-8 replaced by U+FFFD), with
    /// `[... N bytes omitted ...]` between the halves when the stream did
    /// not fit.
    pub(crate) fn text(&self) -> String {
        let keep = self.cap - self.cap / 2;
        let tail = &self.tail[self.tail.len().saturating_sub(keep)..];
        let omitted = self.omitted();
        if omitted == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n[... {omitted} bytes omitted ...]\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(tail)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_detection() {
        assert!(!is_binary(b"plain text\n", true));
        assert!(is_binary(b"a\0b", true));
        assert!(is_binary(&[0xff, 0xfe, b'a'], true));
        // "é" cut in half by the end of a partial read is still text...
        assert!(!is_binary(&[b'a', 0xc3], false));
        // ...but not at the end of the whole file.
        assert!(is_binary(&[b'a', 0xc3], true));
        let mut late_nul = vec![b'x'; BINARY_PROBE_BYTES];
        late_nul.push(0);
        // A NUL past the probe is valid UTF-8 (U+0000): text, as grep sees it.
        assert!(!is_binary(&late_nul, true));
    }

    #[test]
    fn line_ranges() {
        let text = "one\ntwo\nthree\nfour";
        let all = select_lines(text, 1, usize::MAX, 1000);
        assert_eq!((all.text.as_str(), all.first, all.last), (text, 1, 4));
        assert_eq!((all.total, all.cut), (4, false));
        let mid = select_lines(text, 2, 3, 1000);
        assert_eq!((mid.text.as_str(), mid.last), ("two\nthree\n", 3));
        let past = select_lines(text, 9, 12, 1000);
        assert_eq!((past.text.as_str(), past.last, past.total), ("", 8, 4));
        // The cap keeps whole lines...
        let capped = select_lines(text, 1, usize::MAX, 9);
        assert_eq!((capped.text.as_str(), capped.last), ("one\ntwo\n", 2));
        assert!(capped.cut);
        // ...or the start of a first line longer than it, on a char boundary.
        let long = select_lines("ééé\n", 1, 1, 3);
        assert_eq!((long.text.as_str(), long.last, long.cut), ("é", 0, true));
    }

    #[test]
    fn exact_replacement() {
        assert_eq!(
            replace_exact("a b c", "b", "B", false),
            Ok(("a B c".into(), 1))
        );
        assert_eq!(
            replace_exact("x x", "x", "y", false),
            Err(EditRefusal::Ambiguous(2))
        );
        assert_eq!(replace_exact("x x", "x", "y", true), Ok(("y y".into(), 2)));
        assert_eq!(
            replace_exact("abc", "z", "y", true),
            Err(EditRefusal::NotFound)
        );
        assert!(matches!(
            replace_exact("abc", "", "y", false),
            Err(EditRefusal::Pointless(_))
        ));
        assert!(matches!(
            replace_exact("abc", "a", "a", false),
            Err(EditRefusal::Pointless(_))
        ));
    }

    #[test]
    fn capped_output() {
        let mut small = Capped::new(10);
        small.push(b"hello");
        small.push(b"12345");
        assert_eq!((small.text().as_str(), small.omitted()), ("hello12345", 0));
        let mut big = Capped::new(10);
        for _ in 0..1000 {
            big.push(b"0123456789");
        }
        big.push(b"END");
        assert_eq!(big.omitted(), 10_003 - 10);
        assert_eq!(big.text(), "01234\n[... 9993 bytes omitted ...]\n89END");
    }
}
