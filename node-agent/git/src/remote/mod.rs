//! Remotes: `clone`, `fetch`, `pull` and `push` talk to another
//! repository through [`Remote`], either over HTTP(S) in git's smart
//! protocol ([`smart_http`]) or to a repository in the same computer,
//! read and written directly through the engine ([`local`]).
//!
//! Design:
//! - The network is the embedding runtime's: [`transport::Transport`] is
//!   a blocking request/response the [`crate::Invocation`] may carry
//!   (none: "network access is not available here"). The shell implements
//!   it with the egress-checked client `curl` uses, so a clone makes the
//!   same policy decisions and reports the policy's reason as git reports
//!   curl's: `fatal: unable to access 'URL/': REASON`.
//! - gitoxide's `gix-protocol`/`gix-transport` drive their own connection
//!   types and are not in this workspace's dependency set; the client
//!   side of protocol v0 over stateless HTTP is small, so it is written
//!   here ([`smart_http`], citing gitprotocol-http.txt and
//!   gitprotocol-pack.txt), framed by `gix-packetline`, while packs are
//!   indexed and read by `gix-pack` ([`pack`]).
//! - Fetches do not ask for `thin-pack`, so every pack received is whole
//!   and is stored as it came, with its index, before any ref moves: a
//!   stopped fetch leaves at most an unreferenced pack, never a ref to a
//!   missing object.
//! - Credentials in a URL (`http://user:token@host/…`) are sent as HTTP
//!   basic authentication. Real git shows URLs without them but keeps them
//!   in `remote.origin.url`; here the password is never written to the
//!   configuration either (the user name is), so a later fetch or push
//!   without it fails as real git does without a terminal to ask on.

pub mod local;
pub mod pack;
pub mod pktline;
pub mod smart_http;
pub mod transport;

use crate::Invocation;
use crate::error::{Error, Result};
use crate::files::join;
use crate::odb::Odb;
use crate::refs::Refs;
use gix_hash::ObjectId;

/// The `agent=` capability sent.
pub const AGENT: &str = "agent=git/2.39.5";

/// What a remote advertises for one service.
#[derive(Debug, Default, Clone)]
pub struct Advert {
    /// Refs with the object each points at (`refs/heads/main`, `HEAD`),
    /// in the order given, without peeled `^{}` entries.
    pub refs: Vec<(String, ObjectId)>,
    /// The ref `HEAD` points at (`refs/heads/main`), when told.
    pub head: Option<String>,
    /// The capabilities of the first line.
    pub caps: Vec<String>,
}

impl Advert {
    /// The object `name` points at on the remote.
    pub fn get(&self, name: &str) -> Option<ObjectId> {
        self.refs.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
    }

    /// Whether capability `name` (or `name=…`) was advertised.
    pub fn has(&self, name: &str) -> bool {
        self.caps
            .iter()
            .any(|c| c == name || c.strip_prefix(name).is_some_and(|r| r.starts_with('=')))
    }
}

/// Which side of the protocol is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// `git-upload-pack`: fetching.
    UploadPack,
    /// `git-receive-pack`: pushing.
    ReceivePack,
}

impl Service {
    /// The service's name in URLs and content types.
    pub fn name(self) -> &'static str {
        match self {
            Service::UploadPack => "git-upload-pack",
            Service::ReceivePack => "git-receive-pack",
        }
    }
}

/// Where a remote is.
pub enum Location {
    /// A smart-HTTP URL.
    Http(smart_http::Url),
    /// A repository of this computer: its git directory.
    Local {
        /// The git directory (`/a/.git`, or `/a.git` for a bare one).
        git_dir: Vec<u8>,
        /// Whether the repository has no work tree.
        bare: bool,
    },
}

/// One ref update a push asks for.
#[derive(Debug, Clone)]
pub struct Update {
    /// What the remote's ref holds now (zero for a new ref).
    pub old: ObjectId,
    /// What it is to hold (zero to delete it).
    pub new: ObjectId,
    /// The remote ref's full name.
    pub name: String,
}

/// A remote opened from a URL or path as typed.
pub struct Remote<'a> {
    inv: &'a Invocation<'a>,
    /// The URL or path as typed (with any credentials).
    pub typed: String,
    /// The URL as shown in messages: without a password.
    pub shown: String,
    /// Where it is.
    pub location: Location,
}

impl<'a> Remote<'a> {
    /// The remote at `typed` (a URL or a path). Errors: a scheme other
    /// than http, https and file; a path that holds no repository.
    pub fn open(inv: &'a Invocation<'a>, typed: &str) -> Result<Self> {
        let lower = typed.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let url = smart_http::Url::parse(typed)?;
            return Ok(Self {
                inv,
                typed: typed.to_string(),
                shown: url.shown(),
                location: Location::Http(url),
            });
        }
        let path = match typed.strip_prefix("file://") {
            Some(p) => p,
            None => {
                if let Some((scheme, _)) = typed.split_once("://") {
                    return Err(Error::fatal(format!(
                        "protocol '{scheme}' is not supported here (http, https and paths in this computer are)"
                    )));
                }
                if let Some((host, _)) = typed.split_once(':')
                    && !host.contains('/')
                    && !host.is_empty()
                {
                    return Err(Error::fatal(format!(
                        "'{typed}': ssh remotes are not supported here (http, https and paths in this computer are)"
                    )));
                }
                typed
            }
        };
        let not_repo = || {
            Error::fatal(format!(
                "'{typed}' does not appear to be a git repository\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists."
            ))
        };
        let dir = inv.engine_path(path.as_bytes()).ok_or_else(not_repo)?;
        let files = &inv.files;
        let is_git_dir = |d: &[u8]| -> Result<bool> {
            Ok(files.lstat(&join(d, b"HEAD"))?.is_some()
                && files.lstat(&join(d, b"objects"))?.is_some())
        };
        let (git_dir, bare) = if is_git_dir(&join(&dir, b".git"))? {
            (join(&dir, b".git"), false)
        } else if is_git_dir(&dir)? {
            (dir, true)
        } else {
            return Err(not_repo());
        };
        Ok(Self {
            inv,
            typed: typed.to_string(),
            shown: typed.to_string(),
            location: Location::Local { git_dir, bare },
        })
    }

    /// The refs and capabilities the remote offers for `service`.
    pub fn advertise(&self, service: Service) -> Result<Advert> {
        match &self.location {
            Location::Http(url) => smart_http::advertise(self.inv, url, service),
            Location::Local { git_dir, .. } => local::advertise(self.inv, git_dir),
        }
    }

    /// Receives the objects of `wants` missing here (given the commits
    /// `haves` this side has) into the object directory `objects_dir`.
    pub fn fetch(
        &self,
        advert: &Advert,
        objects_dir: &[u8],
        wants: &[ObjectId],
        haves: &[ObjectId],
    ) -> Result<()> {
        if wants.is_empty() {
            return Ok(());
        }
        match &self.location {
            Location::Http(url) => {
                let pack = smart_http::upload_pack(self.inv, url, advert, wants, haves)?;
                pack::store(self.inv, &self.inv.files, objects_dir, pack).map(|_| ())
            }
            Location::Local { git_dir, .. } => {
                let theirs = Odb::new(self.inv.files.clone(), join(git_dir, b"objects"));
                let objects = pack::objects_to_send(self.inv, &theirs, wants, haves)?;
                let bytes = pack::build(self.inv, &theirs, &objects)?;
                pack::store(self.inv, &self.inv.files, objects_dir, bytes).map(|_| ())
            }
        }
    }

    /// Sends `updates` with the objects they need from `odb`; returns,
    /// per ref, `None` when it was updated or the remote's reason.
    pub fn push(
        &self,
        advert: &Advert,
        odb: &Odb,
        updates: &[Update],
    ) -> Result<Vec<(String, Option<String>)>> {
        let zero = ObjectId::null(crate::odb::HASH);
        let wants: Vec<ObjectId> = updates
            .iter()
            .filter(|u| u.new != zero)
            .map(|u| u.new)
            .collect();
        let haves: Vec<ObjectId> = advert.refs.iter().map(|(_, id)| *id).collect();
        let pack = if wants.is_empty() {
            None
        } else {
            let objects = pack::objects_to_send(self.inv, odb, &wants, &haves)?;
            Some(pack::build(self.inv, odb, &objects)?)
        };
        match &self.location {
            Location::Http(url) => smart_http::receive_pack(self.inv, url, advert, updates, pack),
            Location::Local { git_dir, bare } => {
                local::receive(self.inv, git_dir, *bare, updates, pack)
            }
        }
    }
}

/// The refs of the repository whose git directory is `git_dir`.
pub(crate) fn refs_at(inv: &Invocation, git_dir: &[u8]) -> Refs {
    Refs::new(inv.files.clone(), git_dir.to_vec())
}
