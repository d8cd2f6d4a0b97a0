//! The `SIZE` operand of `truncate -s`, as GNU coreutils reads it: an
//! optional operator (`+` extend by, `-` reduce by, `<` at most, `>` at
//! least, `/` round down to a multiple of, `%` round up to one) and a
//! number with an optional unit (`K`/`KiB` 1024, `KB` 1000, `M`, `MB`,
//! `G`, ... up to `E`). Sizes are `off_t`: at most `i64::MAX` bytes.

/// A parsed `SIZE`: what to do with a file's current size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SizeSpec {
    Absolute(u64),
    ExtendBy(u64),
    ReduceBy(u64),
    AtMost(u64),
    AtLeast(u64),
    RoundDownTo(u64),
    RoundUpTo(u64),
}

/// Why a `SIZE` was refused, as GNU truncate words it (after
/// `truncate: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SizeError {
    /// `Invalid number: 'x'`.
    Invalid(String),
    /// `Invalid number: '8E': Value too large for defined data type`.
    TooLarge(String),
    /// `/0` or `%0`.
    DivisionByZero,
    /// The result does not fit an `off_t`.
    Overflow,
}

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeError::Invalid(s) => write!(f, "Invalid number: '{s}'"),
            SizeError::TooLarge(s) => write!(
                f,
                "Invalid number: '{s}': Value too large for defined data type"
            ),
            SizeError::DivisionByZero => f.write_str("division by zero"),
            SizeError::Overflow => f.write_str("Value too large for defined data type"),
        }
    }
}

/// Largest size a file can have (`off_t`).
const MAX_SIZE: u64 = i64::MAX as u64;

impl SizeSpec {
    /// Parses `text` (the argument of `-s`).
    pub(super) fn parse(text: &str) -> Result<SizeSpec, SizeError> {
        let invalid = || SizeError::Invalid(text.to_string());
        let (make, rest): (fn(u64) -> SizeSpec, &str) = match text.chars().next() {
            Some('+') => (SizeSpec::ExtendBy, &text[1..]),
            Some('-') => (SizeSpec::ReduceBy, &text[1..]),
            Some('<') => (SizeSpec::AtMost, &text[1..]),
            Some('>') => (SizeSpec::AtLeast, &text[1..]),
            Some('/') => (SizeSpec::RoundDownTo, &text[1..]),
            Some('%') => (SizeSpec::RoundUpTo, &text[1..]),
            _ => (SizeSpec::Absolute, text),
        };
        let rest = rest.trim_start();
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let (number, unit) = rest.split_at(digits);
        let multiplier = unit_bytes(unit).ok_or_else(invalid)?;
        let too_large = || SizeError::TooLarge(text.to_string());
        let number: u64 = number.parse().map_err(|_| too_large())?;
        let bytes = number.checked_mul(multiplier).ok_or_else(too_large)?;
        if bytes > MAX_SIZE {
            return Err(too_large());
        }
        let spec = make(bytes);
        if matches!(spec, SizeSpec::RoundDownTo(0) | SizeSpec::RoundUpTo(0)) {
            return Err(SizeError::DivisionByZero);
        }
        Ok(spec)
    }

    /// Whether the size depends on the file's current size (the only
    /// kind `--reference` may be combined with).
    pub(super) fn is_relative(self) -> bool {
        !matches!(self, SizeSpec::Absolute(_))
    }

    /// The new size of a file whose size is `current`.
    pub(super) fn apply(self, current: u64) -> Result<u64, SizeError> {
        let size = match self {
            SizeSpec::Absolute(n) => n,
            SizeSpec::ExtendBy(n) => current.checked_add(n).ok_or(SizeError::Overflow)?,
            SizeSpec::ReduceBy(n) => current.saturating_sub(n),
            SizeSpec::AtMost(n) => current.min(n),
            SizeSpec::AtLeast(n) => current.max(n),
            SizeSpec::RoundDownTo(n) => current / n * n,
            SizeSpec::RoundUpTo(n) => current
                .div_ceil(n)
                .checked_mul(n)
                .ok_or(SizeError::Overflow)?,
        };
        if size > MAX_SIZE {
            return Err(SizeError::Overflow);
        }
        Ok(size)
    }
}

/// Bytes per unit of suffix `unit`, or `None` if it is not one.
fn unit_bytes(unit: &str) -> Option<u64> {
    if unit.is_empty() {
        return Some(1);
    }
    let mut chars = unit.chars();
    let letter = chars.next()?;
    let power: u32 = match letter {
        'k' | 'K' => 1,
        'M' => 2,
        'G' => 3,
        'T' => 4,
        'P' => 5,
        'E' => 6,
        _ => return None,
    };
    let base: u64 = match chars.as_str() {
        "" | "iB" => 1024,
        "B" => 1000,
        _ => return None,
    };
    Some(base.pow(power))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_gnu_truncate_reads_them() {
        assert_eq!(SizeSpec::parse("10"), Ok(SizeSpec::Absolute(10)));
        assert_eq!(SizeSpec::parse("1K"), Ok(SizeSpec::Absolute(1024)));
        assert_eq!(SizeSpec::parse("1k"), Ok(SizeSpec::Absolute(1024)));
        assert_eq!(SizeSpec::parse("1KiB"), Ok(SizeSpec::Absolute(1024)));
        assert_eq!(SizeSpec::parse("1KB"), Ok(SizeSpec::Absolute(1000)));
        assert_eq!(SizeSpec::parse("8G"), Ok(SizeSpec::Absolute(8 << 30)));
        assert_eq!(SizeSpec::parse("+2M"), Ok(SizeSpec::ExtendBy(2 << 20)));
        assert_eq!(SizeSpec::parse("-5"), Ok(SizeSpec::ReduceBy(5)));
        assert_eq!(SizeSpec::parse("<7"), Ok(SizeSpec::AtMost(7)));
        assert_eq!(SizeSpec::parse(">7"), Ok(SizeSpec::AtLeast(7)));
        assert_eq!(SizeSpec::parse("/4K"), Ok(SizeSpec::RoundDownTo(4096)));
        assert_eq!(SizeSpec::parse("%4K"), Ok(SizeSpec::RoundUpTo(4096)));
        for bad in ["", "x", "1b", "1Q", "K", "+", "1KX"] {
            assert_eq!(
                SizeSpec::parse(bad),
                Err(SizeError::Invalid(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            SizeSpec::parse("8E").unwrap_err().to_string(),
            "Invalid number: '8E': Value too large for defined data type"
        );
        assert_eq!(
            SizeSpec::parse("99999999999999999999"),
            Err(SizeError::TooLarge("99999999999999999999".into()))
        );
        assert_eq!(SizeSpec::parse("/0"), Err(SizeError::DivisionByZero));
    }

    #[test]
    fn relative_sizes_apply_to_the_current_size() {
        assert_eq!(SizeSpec::ExtendBy(5).apply(10), Ok(15));
        assert_eq!(SizeSpec::ReduceBy(15).apply(10), Ok(0));
        assert_eq!(SizeSpec::AtMost(4).apply(10), Ok(4));
        assert_eq!(SizeSpec::AtMost(40).apply(10), Ok(10));
        assert_eq!(SizeSpec::AtLeast(40).apply(10), Ok(40));
        assert_eq!(SizeSpec::RoundDownTo(4).apply(10), Ok(8));
        assert_eq!(SizeSpec::RoundUpTo(4).apply(10), Ok(12));
        assert_eq!(SizeSpec::RoundUpTo(4).apply(12), Ok(12));
        assert_eq!(
            SizeSpec::ExtendBy(MAX_SIZE).apply(1),
            Err(SizeError::Overflow)
        );
        assert!(SizeSpec::ExtendBy(1).is_relative());
        assert!(!SizeSpec::Absolute(1).is_relative());
    }
}
