//! Parsing sizes such as `10Gi` or `500M` (Kubernetes quantity suffixes).

/// Parses a byte count: a number (decimals allowed) with an optional suffix.
/// Binary suffixes `Ki Mi Gi Ti Pi Ei` are powers of 1024, decimal ones
/// `k K M G T P E` powers of 1000 (as Kubernetes resource quantities); a
/// trailing `B` is accepted too (`GiB`, `GB`). Errors: empty, malformed,
/// unknown suffix, or more than `u64::MAX` bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let suffix = suffix.trim();
    let suffix = suffix.strip_suffix('B').unwrap_or(suffix);
    let scale: f64 = match suffix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        other => {
            return Err(format!(
                "unknown size suffix {other:?} in {text:?} (use e.g. 500Mi, 10Gi, 1G)"
            ));
        }
    };
    if number.is_empty() {
        return Err(format!(
            "invalid size {text:?}: expected a number such as 10Gi"
        ));
    }
    // Whole numbers stay exact; fractions go through f64.
    let bytes = match number.parse::<u64>() {
        Ok(n) if scale.fract() == 0.0 => (n as u128) * (scale as u128),
        _ => {
            let n: f64 = number
                .parse()
                .map_err(|_| format!("invalid size {text:?}: expected a number such as 10Gi"))?;
            (n * scale).round() as u128
        }
    };
    u64::try_from(bytes).map_err(|_| format!("size {text:?} is too large"))
}

/// A byte count for people: `1.5 GiB`, `12 KiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

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

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(10 << 30), "10 GiB");
    }
}
