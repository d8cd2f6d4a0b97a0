//! Running the synchronous filesystem engine from async code.

/// Runs `f` on tokio's blocking thread pool and returns its result, so that
/// SQLite transactions never stall the async worker threads. A panic in `f`
/// is resumed in the caller.
pub async fn blocking<T, F>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(err) => std::panic::resume_unwind(err.into_panic()),
    }
}
