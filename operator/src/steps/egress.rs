//! The egress step: the sandbox's NetworkPolicy (`NAME-egress`) from
//! `spec.egress`, applied whatever happened to the steps before it.

use agentcomputer_crds::AgentComputer;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;

use crate::context::Config;
use crate::error::{Error, Result};
use crate::resources::{self, netpol};
use crate::writes::apply_obj;

/// Applies the policy of `c` in namespace `ns`. With `spec_error` (a spec
/// the node agent would refuse, see [`crate::spec_check`]) the narrowest
/// policy (deny-all) is applied instead, and the step then fails with
/// [`Error::InvalidSpec`]. Errors: that, or the API server's refusal.
pub async fn apply(
    client: &kube::Client,
    config: &Config,
    c: &AgentComputer,
    ns: &str,
    spec_error: Option<&str>,
) -> Result<()> {
    let nps: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns);
    let policy = match spec_error {
        None => netpol::build(c, config),
        Some(_) => {
            let mut narrowest = c.clone();
            narrowest.spec.egress = Default::default();
            netpol::build(&narrowest, config)
        }
    };
    apply_obj(&nps, &resources::netpol_name(c), &policy).await?;
    match spec_error {
        Some(why) => Err(Error::InvalidSpec(why.to_string())),
        None => Ok(()),
    }
}
