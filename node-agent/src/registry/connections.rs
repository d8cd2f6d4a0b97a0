//! FUSE connections handed over by the cluster's mounter, kept with the
//! computer they serve.

use std::sync::{Arc, Weak};
use std::time::Instant;

use agentcomputer_fuse::ConnectionHandle;
use tracing::info;

use super::*;

impl Registry {
    /// Keeps `conn`, a FUSE connection served over `lease`'s engine (handed
    /// over by the cluster's mounter), with the computer: it is not
    /// hibernated while the connection lives. The connection removes itself
    /// when the kernel ends it. Errors: `NotFound` when the computer was
    /// deleted (or the agent is shutting down) since `lease` was taken; the
    /// connection is then dropped, still served until the kernel ends it.
    pub async fn attach_connection(
        &self,
        lease: &Lease,
        conn: ConnectionHandle,
    ) -> Result<(), RegistryError> {
        let _guard = self.inner.names.lock(lease.name()).await;
        if lease.slot.cancel.is_cancelled() {
            return Err(RegistryError::NotFound(lease.name().to_string()));
        }
        let id = conn.id();
        let weak: Weak<Slot> = Arc::downgrade(&lease.slot);
        let name = lease.name().to_string();
        conn.on_end(move || {
            if let Some(slot) = weak.upgrade() {
                *slot.last_used.lock() = Instant::now();
                slot.connections.lock().remove(&id);
            }
            info!(computer = %name, connection = id, "FUSE connection ended");
        });
        // Checked under the map's lock: a session ending now runs the hook
        // after the insert, and one that already ended is not inserted.
        let mut connections = lease.slot.connections.lock();
        if conn.is_serving() {
            connections.insert(id, conn);
        }
        Ok(())
    }

    /// How many handed-over FUSE connections serve computer `name` now.
    pub fn connection_count(&self, name: &str) -> usize {
        self.inner
            .open
            .lock()
            .get(name)
            .map_or(0, |s| s.connections.lock().len())
    }
}
