//! Byte counts of Kubernetes resource quantities (`spec.storage.size`, a
//! CSIStorageCapacity's `capacity`). Messages show byte counts with
//! `agentcomputer_runtime_contract::human_quantity`.
//!
//! Grammar, from the `resource.Quantity` documentation of
//! k8s.io/apimachinery (`pkg/api/resource/quantity.go`):
//!
//! ```text
//! quantity ::= signedNumber suffix
//! number   ::= digits | digits "." digits | digits "." | "." digits
//! suffix   ::= binarySI | decimalExponent | decimalSI
//! binarySI ::= Ki | Mi | Gi | Ti | Pi | Ei          (2^10 .. 2^60)
//! decimalSI ::= m | "" | k | M | G | T | P | E      (10^-3 .. 10^18)
//! decimalExponent ::= ("e" | "E") signedNumber      (integer exponent)
//! ```
//!
//! Like `Quantity.Value()`, a fractional byte count is rounded up.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Why a quantity is not a byte count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantityError {
    /// Not of the Kubernetes quantity grammar (the text is included).
    Syntax(String),
    /// Negative: sizes and capacities cannot be.
    Negative(String),
    /// More than `u64::MAX` bytes.
    TooLarge(String),
}

impl std::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuantityError::Syntax(q) => write!(
                f,
                "{q:?} is not a Kubernetes quantity (such as 512Mi, 10Gi or 1e9)"
            ),
            QuantityError::Negative(q) => write!(f, "{q:?} is negative; a size cannot be"),
            QuantityError::TooLarge(q) => write!(f, "{q:?} is more than 2^64-1 bytes"),
        }
    }
}

impl std::error::Error for QuantityError {}

/// The byte count of `q`, rounded up to a whole byte.
///
/// Errors: [`QuantityError`] for text outside the grammar, a negative value,
/// or more than `u64::MAX` bytes.
pub fn quantity_bytes(q: &Quantity) -> Result<u64, QuantityError> {
    parse_bytes(&q.0)
}

/// [`quantity_bytes`] of a string.
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_string());
    let s = text.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(num_end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(syntax());
    }
    // Scale: value = digits * 2^bin * 10^exp10.
    let (bin, exp10): (u32, i64) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        e if e.starts_with(['e', 'E']) => {
            let exp = &e[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            (0, exp.parse::<i64>().map_err(|_| syntax())?)
        }
        _ => return Err(syntax()),
    };
    let digits: String = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative(text.to_string()));
    }
    let too_large = || QuantityError::TooLarge(text.to_string());
    let exp10 = exp10 - frac.len() as i64;
    // A value above 2^64 needs at most 20 significant digits after scaling;
    // anything longer with a non-negative exponent is too large.
    if digits.len() as i64 + exp10 > 40 {
        return Err(too_large());
    }
    if exp10 < -60 {
        // Less than one byte, but not zero: rounds up.
        return Ok(1);
    }
    let mantissa: u128 = digits.parse().map_err(|_| too_large())?;
    let mut num = mantissa.checked_shl(bin).ok_or_else(too_large)?;
    if bin > 0 && num >> bin != mantissa {
        return Err(too_large());
    }
    let mut den: u128 = 1;
    if exp10 >= 0 {
        num = num
            .checked_mul(10u128.checked_pow(exp10 as u32).ok_or_else(too_large)?)
            .ok_or_else(too_large)?;
    } else {
        den = 10u128.checked_pow((-exp10) as u32).ok_or_else(too_large)?;
    }
    let bytes = num.div_ceil(den);
    u64::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_forms() {
        for (q, want) in [
            ("0", 0),
            ("1", 1),
            ("1Ki", 1024),
            ("5Gi", 5 << 30),
            ("1.5Gi", 3 << 29),
            ("1k", 1000),
            ("2M", 2_000_000),
            ("1G", 1_000_000_000),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1E", 1_000_000_000_000_000_000),
            ("1Ei", 1 << 60),
            ("+7", 7),
            (".5Ki", 512),
            ("3.", 3),
            ("1500m", 2),
            ("1m", 1),
            ("12e-1", 2),
            ("0.0Gi", 0),
            ("15Ei", 15 << 60),
        ] {
            assert_eq!(parse_bytes(q), Ok(want), "{q}");
        }
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        for q in [
            "", "Gi", "1.2.3", "1Gb", "1 Gi", "e3", "1e", "1e+", "abc", ".",
        ] {
            assert!(
                matches!(parse_bytes(q), Err(QuantityError::Syntax(_))),
                "{q}: {:?}",
                parse_bytes(q)
            );
        }
        assert_eq!(
            parse_bytes("-1Gi"),
            Err(QuantityError::Negative("-1Gi".into()))
        );
        assert_eq!(
            parse_bytes("16Ei"),
            Err(QuantityError::TooLarge("16Ei".into()))
        );
        assert!(matches!(
            parse_bytes("1e30"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(
            parse_bytes("1Gb")
                .unwrap_err()
                .to_string()
                .contains("not a Kubernetes quantity")
        );
    }
}
