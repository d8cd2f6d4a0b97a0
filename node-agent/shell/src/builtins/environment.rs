//! The exported environment a script starts with.
//!
//! bashkit sets `HOME`, `PATH`, `USER` and `SHELL` as shell variables but
//! does not export them, so `env` listed only `PWD` and `printenv HOME`
//! failed, where bash started by a login or container exports them. They
//! are exported here with the values bashkit gives the variables; a
//! request's own `env` is applied after and wins.

use bashkit::BashBuilder;

/// bashkit's `PATH` for the virtual system layer.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Exports the login variables of bashkit's virtual user `user` with home
/// directory `home`.
pub(crate) fn export_login(builder: BashBuilder, user: &str, home: &str) -> BashBuilder {
    builder
        .env("HOME", home)
        .env("PATH", PATH)
        .env("USER", user)
        .env("LOGNAME", user)
        .env("SHELL", "/bin/bash")
}
