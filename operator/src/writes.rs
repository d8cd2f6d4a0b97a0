//! How the operator writes to the API server: server-side apply of typed
//! objects under its field manager, merge patches recorded under the same
//! manager, and deletes that tolerate an object already gone.

use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::FIELD_MANAGER;
use crate::error::{Result, is_not_found};

/// Server-side apply under [`FIELD_MANAGER`], taking fields over from other
/// managers (the operator owns the fields it writes).
pub fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// A merge patch recorded under the operator's field manager.
pub fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Applies `obj` (a typed object: its serialization carries `apiVersion`
/// and `kind`) as `name` by server-side apply ([`ssa`]); returns the object
/// the API server stored. Errors: the API server's refusal (409 on a
/// `resourceVersion` precondition, 422 for an invalid or immutable change,
/// 403 from admission), or a transport failure.
pub async fn apply_obj<K>(api: &Api<K>, name: &str, obj: &K) -> Result<K>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    Ok(api.patch(name, &ssa(), &Patch::Apply(obj)).await?)
}

/// Deletes `name` in the background (dependents by garbage collection).
/// Returns whether it existed; an absent object (404) is not an error.
pub async fn delete_ignoring_absent<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Merge-patches `name` with `patch` under `params`; an absent object (404)
/// is `Ok(false)`, an applied patch `Ok(true)`.
pub async fn merge_if_present<K>(
    api: &Api<K>,
    name: &str,
    params: &PatchParams,
    patch: &serde_json::Value,
) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.patch(name, params, &Patch::Merge(patch)).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
