//! Byte counts as people read them, written once for every message and
//! table that shows one: a limit a runtime enforced, an admission refusal,
//! a quota in the CLI's listings, the free space the operator reports.
//!
//! A count is shown in the largest binary unit it reaches (powers of
//! 1024), with one decimal at most, **rounded down**, so that a limit or
//! free space is never overstated; a whole number has no decimal. Two
//! spellings of that one scale: [`human_bytes`] for prose and tables
//! (`256 MiB`, `100 bytes`) and [`human_quantity`] for messages that stand
//! beside Kubernetes quantities such as `spec.storage.size` (`256Mi`,
//! `100`).

/// The binary prefixes in order: `K` is 2^10 … `E` is 2^60.
const PREFIXES: [&str; 6] = ["K", "M", "G", "T", "P", "E"];

/// `n` scaled: the tenths of the largest binary unit it reaches and that
/// unit's prefix (`K` … `E`), or None under 1 KiB.
fn scaled(n: u64) -> Option<(u128, &'static str)> {
    let i = (0..PREFIXES.len())
        .rev()
        .find(|i| n >> (10 * (i + 1)) > 0)?;
    let tenths = (u128::from(n) * 10) >> (10 * (i + 1));
    Some((tenths, PREFIXES[i]))
}

/// `1.5` or `2`: tenths as a number with one decimal, none when whole.
fn decimal(tenths: u128) -> String {
    if tenths.is_multiple_of(10) {
        format!("{}", tenths / 10)
    } else {
        format!("{}.{}", tenths / 10, tenths % 10)
    }
}

/// `n` bytes for prose and tables: `100 bytes`, `1.5 KiB`, `256 MiB`,
/// `11.2 GiB`, up to `EiB` (see the module doc for the rounding).
pub fn human_bytes(n: u64) -> String {
    match scaled(n) {
        None => format!("{n} bytes"),
        Some((tenths, prefix)) => format!("{} {prefix}iB", decimal(tenths)),
    }
}

/// `n` bytes with Kubernetes quantity suffixes, for messages beside
/// quantities a user wrote: `100`, `1.5Ki`, `2Gi`, up to `Ei` (see the
/// module doc for the rounding). Not always a valid quantity to parse
/// back exactly (`1.5Ki` is 1536, `1.9Gi` rounds down).
pub fn human_quantity(n: u64) -> String {
    match scaled(n) {
        None => n.to_string(),
        Some((tenths, prefix)) => format!("{}{prefix}i", decimal(tenths)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_a_kibibyte_is_bytes() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(10), "10 bytes");
        assert_eq!(human_bytes(1023), "1023 bytes");
        assert_eq!(human_quantity(0), "0");
        assert_eq!(human_quantity(1023), "1023");
    }

    #[test]
    fn whole_units_have_no_decimal() {
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(10 << 30), "10 GiB");
        assert_eq!(human_bytes(1 << 40), "1 TiB");
        assert_eq!(human_bytes(3 << 60), "3 EiB");
        assert_eq!(human_quantity(1024), "1Ki");
        assert_eq!(human_quantity(2 << 30), "2Gi");
    }

    #[test]
    fn one_decimal_rounded_down() {
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes((11 << 30) + (1 << 28)), "11.2 GiB");
        // 1.99 GiB is not shown as 2: free space is never overstated.
        assert_eq!(human_bytes((2 << 30) - 1), "1.9 GiB");
        assert_eq!(human_quantity((2 << 30) - 1), "1.9Gi");
        assert_eq!(human_quantity(3 << 29), "1.5Gi");
        assert_eq!(human_bytes(u64::MAX), "15.9 EiB");
        assert_eq!(human_quantity(u64::MAX), "15.9Ei");
    }
}
