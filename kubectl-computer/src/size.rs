//! Sizes on the command line: parsing `10Gi` or `500M` (Kubernetes quantity
//! suffixes), writing them back as quantities, and showing them to people.

/// Parses a byte count: a Kubernetes quantity (`10Gi`, `500M`, `1.5Gi`,
/// `1e9`, with the operator's parser, `agentcomputer_crds::quantity`), also
/// written with a trailing `B` (`GiB`, `GB`) or an upper-case `K`. Errors:
/// empty, malformed, unknown suffix, negative, or more than `u64::MAX`
/// bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t: String = text.split_whitespace().collect();
    let t = t.strip_suffix('B').unwrap_or(&t);
    let t = match t.strip_suffix('K') {
        Some(n) => format!("{n}k"),
        None => t.to_string(),
    };
    use agentcomputer_crds::quantity::{QuantityError, parse_bytes};
    parse_bytes(&t).map_err(|e| {
        let why = match e {
            QuantityError::Syntax(_) => "not a size: unknown size suffix or malformed number",
            QuantityError::Negative(_) => "a size cannot be negative",
            QuantityError::TooLarge(_) => "more than 2^64-1 bytes",
        };
        format!("invalid size {text:?}: {why} (use e.g. 500Mi, 10Gi, 1G)")
    })
}

/// A byte count for people, as every crate shows one: `1.5 GiB`,
/// `12 KiB`, `512 bytes` (one decimal at most, rounded down).
pub use agentcomputer_runtime_contract::human_bytes as human;

/// `bytes` as a Kubernetes quantity string: with the suffix (`Ki` … `Ei`,
/// `k` … `E`) that divides it exactly into the smallest number, else a
/// plain number: `10737418240` → `10Gi`,
/// `2000000000` → `2G`, `1500` → `1500`. [`parse_size`] reads it back.
pub fn quantity(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
    let binary = (0..6).map(|i| (1u64 << (10 * (i + 1)), BINARY[i]));
    let decimal = (0..6).map(|i| (1000u64.pow(i as u32 + 1), DECIMAL[i]));
    binary
        .chain(decimal)
        .filter(|(unit, _)| bytes.is_multiple_of(*unit))
        .map(|(unit, suffix)| (bytes / unit, suffix))
        .min_by_key(|(count, _)| *count)
        .map_or_else(
            || bytes.to_string(),
            |(count, suffix)| format!("{count}{suffix}"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_trip() {
        for (bytes, text) in [
            (10 << 30, "10Gi"),
            (500 << 20, "500Mi"),
            (1536, "1536"),
            (2_000_000_000, "2G"),
            (3 << 60, "3Ei"),
            (1500, "1500"),
            (1000, "1k"),
            (0, "0"),
        ] {
            assert_eq!(quantity(bytes), text);
            assert_eq!(parse_size(text).unwrap(), bytes, "{text}");
        }
    }

    #[test]
    fn parses_quantities() {
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert_eq!(parse_size("10Gi").unwrap(), 10 << 30);
        assert_eq!(parse_size("10GiB").unwrap(), 10 << 30);
        assert_eq!(parse_size("500Mi").unwrap(), 500 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("2k").unwrap(), 2000);
        assert_eq!(parse_size("1.5Ki").unwrap(), 1536);
        assert_eq!(parse_size(" 3 Mi ").unwrap(), 3 << 20);
    }

    #[test]
    fn rejects_bad_sizes() {
        for bad in ["", "Gi", "10Q", "1.2.3G", "-1", "99999999999Ei"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
