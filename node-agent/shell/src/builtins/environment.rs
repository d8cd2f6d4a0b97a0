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

/// bash's word-splitting default: space, tab, newline.
const DEFAULT_IFS: &str = " \t\n";

/// The shell's own path, `$BASH` (bashkit runs `/bin/bash -c ...` itself).
const SHELL_PATH: &str = "/bin/bash";

/// Sets the shell variables bash sets at start-up that bashkit leaves
/// unset, none of them exported (as bash does):
/// - `IFS`: space, tab, newline, and not taken from the environment. With
///   `IFS` unset, `old=$IFS; IFS=:; ...; IFS=$old` would leave it empty and
///   turn word splitting off for the rest of the script.
/// - `OPTERR`: 1 (`getopts` reports errors), so `set -u` scripts can read it.
/// - `BASH`: the path the shell was started as, `/bin/bash`.
pub(crate) fn set_startup_variables(bash: &mut bashkit::Bash) {
    let mut state = bash.shell_state();
    for (name, value) in [("IFS", DEFAULT_IFS), ("OPTERR", "1"), ("BASH", SHELL_PATH)] {
        state.variables.insert(name.into(), value.into());
        state.env.remove(name);
    }
    bash.restore_shell_state(&state);
}
