//! A reader that holds the tar crate to a budget of metadata bytes.

use std::cell::Cell;
use std::io::Read;
use std::rc::Rc;

/// Most bytes the tar reader may take between two entries: a header block,
/// GNU long-name and long-link blocks, PAX records and the padding of the
/// entry before (1 MiB). The tar crate reads these whole into memory, so
/// an archive claiming a gigabyte of name is refused here, not allocated.
pub const METADATA_BUDGET: u64 = 1024 * 1024;

/// An archive reader that fails once it has given more bytes than its
/// allowance; its user sets the allowance to [`METADATA_BUDGET`] before
/// each entry's headers and lifts it only while it copies file data.
pub(crate) struct Metered<R> {
    pub(crate) inner: R,
    pub(crate) left: Rc<Cell<u64>>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left.get();
        if left == 0 {
            return Err(std::io::Error::other(format!(
                "more than {METADATA_BUDGET} bytes of headers and names for one entry"
            )));
        }
        let most = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..most])?;
        self.left.set(left - n as u64);
        Ok(n)
    }
}
