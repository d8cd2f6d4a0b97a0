//! Search calls: the paths a glob matches, and grep's request.

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;

/// The paths matching `pattern` (relative to `/workspace`, sorted), at
/// most `max` of them (0: the agent's default, 10000); `truncated` says
/// when more matched. Errors: the API's (a bad pattern is EINVAL).
pub async fn glob_paths(
    client: &mut Client,
    computer: String,
    pattern: String,
    max: u32,
) -> Result<pb::GlobResponse> {
    Ok(client
        .glob(pb::GlobRequest {
            computer,
            pattern,
            max_results: max,
        })
        .await?
        .into_inner())
}

/// What `grep` searches.
pub struct GrepArgs {
    /// The computer, as the API's `computer` field names it.
    pub computer: String,
    /// A regular expression (the `regex` crate's syntax) matched per line.
    pub pattern: String,
    /// A file or a directory searched recursively; empty is `/workspace`.
    pub path: String,
    /// Only files matching this glob (a name pattern, or a path pattern
    /// with `/`); empty is every file.
    pub glob: String,
    /// Match letters regardless of case.
    pub ignore_case: bool,
    /// Stop after this many matches; 0 is the agent's default, 1000.
    pub max: u32,
}

impl GrepArgs {
    /// The API request (`max` 0 is the agent's default, 1000).
    pub fn request(self) -> pb::GrepRequest {
        pb::GrepRequest {
            computer: self.computer,
            path: self.path,
            pattern: self.pattern,
            glob: self.glob,
            max_matches: self.max,
            case_insensitive: self.ignore_case,
        }
    }
}
