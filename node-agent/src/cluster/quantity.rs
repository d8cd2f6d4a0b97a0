//! Kubernetes quantities (`10Gi`, `1.5G`, `500M`, `1e9`) as byte counts.
//!
//! The grammar is resource.Quantity's (k8s.io/apimachinery
//! `pkg/api/resource/quantity.go`): a decimal number with an optional
//! fraction, then a binary suffix (`Ki Mi Gi Ti Pi Ei`, powers of 1024), a
//! decimal suffix (`m`, `k M G T P E`, powers of 1000) or a decimal exponent
//! (`e3`, `E-2`). Byte counts round fractions of a byte up, as Kubernetes
//! does when it asks for a quantity's integer value.

/// Why a quantity is not a byte count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not of the quantity grammar.
    #[error("{0:?} is not a quantity (expected e.g. 10Gi, 500M, 1e9)")]
    Syntax(String),
    /// Negative.
    #[error("{0:?} is negative")]
    Negative(String),
    /// More than 2^63 - 1 bytes.
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// The byte count of `text`, rounded up to a whole byte.
/// Errors: [`QuantityError`].
pub fn to_bytes(text: &str) -> Result<u64, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_string());
    let t = text.trim();
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let number_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(syntax());
    }
    // mantissa = digits without the point; value = mantissa * 10^-scale.
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(QuantityError::TooLarge(text.to_string()));
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| syntax())?
    };
    let mut ten_exp: i32 = -(fraction.len() as i32);
    let mut multiplier: u128 = 1;
    match suffix {
        "" => {}
        "Ki" => multiplier = 1 << 10,
        "Mi" => multiplier = 1 << 20,
        "Gi" => multiplier = 1 << 30,
        "Ti" => multiplier = 1 << 40,
        "Pi" => multiplier = 1 << 50,
        "Ei" => multiplier = 1 << 60,
        "m" => ten_exp -= 3,
        "k" => ten_exp += 3,
        "M" => ten_exp += 6,
        "G" => ten_exp += 9,
        "T" => ten_exp += 12,
        "P" => ten_exp += 15,
        "E" => ten_exp += 18,
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().map_err(|_| syntax())?;
            if !(-40..=40).contains(&exp) {
                return Err(QuantityError::TooLarge(text.to_string()));
            }
            ten_exp += exp;
        }
        _ => return Err(syntax()),
    }
    if negative && mantissa != 0 {
        return Err(QuantityError::Negative(text.to_string()));
    }
    let too_large = || QuantityError::TooLarge(text.to_string());
    let mut value = mantissa.checked_mul(multiplier).ok_or_else(too_large)?;
    if ten_exp >= 0 {
        let scale = 10u128.checked_pow(ten_exp as u32).ok_or_else(too_large)?;
        value = value.checked_mul(scale).ok_or_else(too_large)?;
    } else {
        let scale = 10u128
            .checked_pow((-ten_exp) as u32)
            .ok_or_else(too_large)?;
        value = value.div_ceil(scale);
    }
    if value > i64::MAX as u128 {
        return Err(too_large());
    }
    Ok(value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        for (text, bytes) in [
            ("0", 0),
            ("1", 1),
            ("1Ki", 1024),
            ("10Gi", 10 << 30),
            ("1.5Gi", 3 << 29),
            ("5G", 5_000_000_000),
            ("500M", 500_000_000),
            ("1k", 1000),
            ("1e3", 1000),
            ("1E6", 1_000_000),
            ("1500m", 2),
            ("0.5", 1),
            ("+2Mi", 2 << 20),
            (".5Ki", 512),
            ("1.", 1),
        ] {
            assert_eq!(to_bytes(text), Ok(bytes), "{text}");
        }
        assert!(matches!(to_bytes("8Ei"), Err(QuantityError::TooLarge(_))));
        for bad in ["", "Gi", "1.2.3", "1Gb", "1 Gi", "abc", "1e", "."] {
            assert!(
                matches!(to_bytes(bad), Err(QuantityError::Syntax(_))),
                "{bad}"
            );
        }
        assert!(matches!(to_bytes("-1Gi"), Err(QuantityError::Negative(_))));
    }
}
