//! The `FUSE_INIT` record as it travels between processes: lowercase
//! hexadecimal of the bytes the kernel sent (header and `fuse_init_in`),
//! which a later server needs to take a live connection over
//! (`agentcomputer_fuse::resume_connection`). The FUSE crate checks the
//! record's contents; this only moves bytes and bounds them.

/// Longest record accepted, in bytes (the kernel's `FUSE_INIT` request is
/// 104 bytes today; room for growth of `fuse_init_in`).
pub const MAX_INIT_BYTES: usize = 4096;

/// The hexadecimal form of `record`.
pub fn encode(record: &[u8]) -> String {
    hex::encode(record)
}

/// The bytes of a hexadecimal record. Errors (`InvalidData`): empty, odd
/// length, a non-hex digit, or longer than [`MAX_INIT_BYTES`].
pub fn decode(text: &str) -> std::io::Result<Vec<u8>> {
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    if text.is_empty() {
        return Err(bad("the FUSE_INIT record is empty".into()));
    }
    if text.len() > 2 * MAX_INIT_BYTES {
        return Err(bad(format!(
            "the FUSE_INIT record is longer than {MAX_INIT_BYTES} bytes"
        )));
    }
    hex::decode(text).map_err(|e| bad(format!("the FUSE_INIT record is not hexadecimal: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let bytes = vec![0x68, 0, 0, 0, 0x1a, 0xff];
        assert_eq!(encode(&bytes), "680000001aff");
        assert_eq!(decode(&encode(&bytes)).unwrap(), bytes);
        for bad in ["", "0", "zz", &"00".repeat(MAX_INIT_BYTES + 1)] {
            let e = decode(bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{bad:?}");
        }
    }
}
