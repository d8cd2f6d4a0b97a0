//! The `Range` request header of a download (RFC 9110 section 14),
//! reduced to what the share server does: one byte range or the whole file.

use http_range_header::{EndPosition, RangeUnsatisfiableError, StartPosition};

/// What to send for a `Range` header and a file of a given size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The whole file, `200 OK`: no `Range`, or one the server ignores as
    /// RFC 9110 section 14.2 allows (not `bytes`, not valid syntax, several
    /// ranges, or an `If-Range` the server cannot match).
    Full,
    /// `206 Partial Content` of bytes `start..=end` (inclusive, as in
    /// `Content-Range`).
    Part { start: u64, end: u64 },
    /// `416 Range Not Satisfiable`: a valid single range that selects no
    /// byte of the file (section 14.1.1: first-pos at or past the end, or
    /// a suffix of length 0, or any range of an empty file).
    Unsatisfiable,
}

/// The plan for header value `range` (if any) over a file of `size` bytes.
/// `if_range`: an `If-Range` header was sent; the server gives out no
/// validators, so it cannot match and the range is ignored (section 13.1.5).
pub fn plan(range: Option<&str>, if_range: bool, size: u64) -> Plan {
    let Some(range) = range else {
        return Plan::Full;
    };
    if if_range {
        return Plan::Full;
    }
    // Range unit names are case-insensitive (section 14.1); the parser
    // knows only the lower-case spelling.
    let range = range.trim();
    let normalized;
    let range = match range.get(..6) {
        Some(unit) if unit.eq_ignore_ascii_case("bytes=") && unit != "bytes=" => {
            normalized = format!("bytes={}", &range[6..]);
            normalized.as_str()
        }
        _ => range,
    };
    let parsed = match http_range_header::parse_range_header(range) {
        Ok(p) => p,
        // `bytes=-0`: a suffix of nothing is a valid range that is never
        // satisfiable (section 14.1.1).
        Err(RangeUnsatisfiableError::ZeroSuffix) => return Plan::Unsatisfiable,
        Err(_) => return Plan::Full,
    };
    let [one] = parsed.ranges.as_slice() else {
        return Plan::Full;
    };
    match (one.start, one.end) {
        (StartPosition::Index(first), end) => {
            if let EndPosition::Index(last) = end
                && last < first
            {
                // Invalid (section 14.1.1): ignored like any bad syntax.
                return Plan::Full;
            }
            if first >= size {
                return Plan::Unsatisfiable;
            }
            let last = match end {
                EndPosition::Index(last) => last.min(size - 1),
                EndPosition::LastByte => size - 1,
            };
            Plan::Part {
                start: first,
                end: last,
            }
        }
        (StartPosition::FromLast(n), _) => {
            if size == 0 {
                return Plan::Unsatisfiable;
            }
            // A suffix longer than the file is the whole file.
            Plan::Part {
                start: size.saturating_sub(n),
                end: size - 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9110_cases() {
        let p = |r: &str| plan(Some(r), false, 10_000);
        assert_eq!(plan(None, false, 10), Plan::Full);
        // Section 14.1.2's examples over a 10000-byte representation.
        assert_eq!(p("bytes=0-499"), Plan::Part { start: 0, end: 499 });
        // The unit's name is case-insensitive (section 14.1).
        assert_eq!(p("BYTES=0-499"), Plan::Part { start: 0, end: 499 });
        assert_eq!(
            p("Bytes=-500"),
            Plan::Part {
                start: 9500,
                end: 9999
            }
        );
        assert_eq!(p("lines=0-1"), Plan::Full);
        assert_eq!(
            p("bytes=500-999"),
            Plan::Part {
                start: 500,
                end: 999
            }
        );
        assert_eq!(
            p("bytes=-500"),
            Plan::Part {
                start: 9500,
                end: 9999
            }
        );
        assert_eq!(
            p("bytes=9500-"),
            Plan::Part {
                start: 9500,
                end: 9999
            }
        );
        // The last position is clamped to the end.
        assert_eq!(
            p("bytes=9000-20000"),
            Plan::Part {
                start: 9000,
                end: 9999
            }
        );
        // A suffix longer than the file is the whole file.
        assert_eq!(
            p("bytes=-20000"),
            Plan::Part {
                start: 0,
                end: 9999
            }
        );
        // Unsatisfiable.
        assert_eq!(p("bytes=10000-"), Plan::Unsatisfiable);
        assert_eq!(p("bytes=20000-30000"), Plan::Unsatisfiable);
        assert_eq!(p("bytes=-0"), Plan::Unsatisfiable);
        assert_eq!(plan(Some("bytes=0-"), false, 0), Plan::Unsatisfiable);
        assert_eq!(plan(Some("bytes=-5"), false, 0), Plan::Unsatisfiable);
        // Ignored: invalid, other units, several ranges, If-Range.
        assert_eq!(p("bytes=5-3"), Plan::Full);
        assert_eq!(p("bytes=x-3"), Plan::Full);
        assert_eq!(p("items=0-3"), Plan::Full);
        assert_eq!(p("bytes=0-1,5-6"), Plan::Full);
        assert_eq!(plan(Some("bytes=0-1"), true, 10), Plan::Full);
    }
}
