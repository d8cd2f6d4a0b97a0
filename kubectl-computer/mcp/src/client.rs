//! The API client of a node agent the tools call: tonic's generated client
//! over a channel, with the agent token sent on every call by the
//! [`Bearer`] interceptor. How the channel is opened (a URL, TLS, a
//! port-forward) and where the token comes from are the caller's business.

use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::error::{Error, Result};

/// A connected API client that sends the agent token with every call.
pub type Client = AgentComputerClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer <token>` (RFC 6750) to every call; nothing
/// without a token.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// Sends no token.
    pub fn none() -> Bearer {
        Bearer(None)
    }

    /// Sends `token`, kept out of logs (a sensitive header value). Errors:
    /// the token holds characters a header cannot carry; `source` says where
    /// it came from (`--token / AGENTCOMPUTER_TOKEN`, a file, a Secret).
    pub fn new(token: &str, source: &str) -> Result<Bearer> {
        bearer_value(token).map(|v| Bearer(Some(v))).map_err(|()| {
            Error::new(format!(
                "the token from {source} is not a valid token (it holds characters a header cannot carry)"
            ))
        })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

/// An API client over an open `channel`, sending what `bearer` holds, with
/// the API's message limit
/// ([`MAX_MESSAGE_BYTES`](agentcomputer_proto::MAX_MESSAGE_BYTES)) both ways.
pub fn over(channel: Channel, bearer: Bearer) -> Client {
    AgentComputerClient::with_interceptor(channel, bearer)
        .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
}

/// `Bearer <token>` as a sensitive header value; `Err` for characters a
/// header cannot hold.
fn bearer_value(token: &str) -> std::result::Result<MetadataValue<Ascii>, ()> {
    let mut value: MetadataValue<Ascii> = format!("Bearer {token}").parse().map_err(|_| ())?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_values() {
        let v = bearer_value("abc").unwrap();
        assert_eq!(v.to_str().unwrap(), "Bearer abc");
        assert!(v.is_sensitive());
        assert!(bearer_value("a\nb").is_err());
        let Err(Error { message: err, .. }) = Bearer::new("a\nb", "the credential Secret ns/c")
        else {
            panic!("a token with a newline was taken");
        };
        assert!(
            err.starts_with("the token from the credential Secret ns/c is not a valid token"),
            "{err}"
        );
    }
}
