//! `uname` telling the truth about where the script runs.
//!
//! bashkit's `uname` invented a kernel (`5.15.0-sandbox`, a fixed version
//! string and `x86_64` on any machine). The shell runtime is an
//! interpreter inside the node agent's process, so its scripts run on the
//! node's kernel: kernel name, release, version and machine are the node's,
//! read from `/proc/sys/kernel` (what uname(2) returns) and the build's
//! architecture, exactly what `uname` prints in a container run on the same
//! node. The node name is the computer's host name, the one `hostname`
//! prints ([`HOSTNAME`]); the operating system is `GNU/Linux`, as GNU
//! coreutils' `uname -o` prints on Linux, whose behaviour the runtime's
//! commands follow.

use bashkit::{Builtin, BuiltinContext, ExecResult, async_trait};
use std::sync::OnceLock;

/// The host name of every computer, as `hostname` and `uname -n` print it
/// and `os.hostname()` of the JavaScript runtime returns.
pub(crate) const HOSTNAME: &str = "computer";

/// What uname(2) says about the node, read once.
struct Node {
    sysname: String,
    release: String,
    version: String,
    machine: String,
}

fn node() -> &'static Node {
    static NODE: OnceLock<Node> = OnceLock::new();
    NODE.get_or_init(|| {
        let read = |name: &str, default: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .map(|s| s.trim().to_string())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        Node {
            sysname: read("ostype", "Linux"),
            release: read("osrelease", "unknown"),
            version: read("version", "unknown"),
            machine: std::env::consts::ARCH.to_string(),
        }
    })
}

/// The `uname` command.
pub(crate) struct Uname;

#[async_trait]
impl Builtin for Uname {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        // s n r v m p i o, in uname's order.
        let mut want = [false; 8];
        let invalid = |what: String| {
            Ok(ExecResult::err(
                format!("uname: {what}\nTry 'uname --help' for more information.\n"),
                1,
            ))
        };
        for arg in ctx.args {
            let letters: String = match arg.as_str() {
                "--all" => "a".into(),
                "--kernel-name" => "s".into(),
                "--nodename" => "n".into(),
                "--kernel-release" => "r".into(),
                "--kernel-version" => "v".into(),
                "--machine" => "m".into(),
                "--processor" => "p".into(),
                "--hardware-platform" => "i".into(),
                "--operating-system" => "o".into(),
                "--help" => {
                    return Ok(ExecResult::ok(
                        "Usage: uname [OPTION]...\nPrint the node's kernel and machine (the shell runs on them).\n\n\
                         \x20 -a, --all                print all information, omitting -p and -i\n\
                         \x20 -s, --kernel-name        print the kernel name\n\
                         \x20 -n, --nodename           print the computer's host name\n\
                         \x20 -r, --kernel-release     print the kernel release\n\
                         \x20 -v, --kernel-version     print the kernel version\n\
                         \x20 -m, --machine            print the machine hardware name\n\
                         \x20 -p, --processor          print the processor type\n\
                         \x20 -i, --hardware-platform  print the hardware platform\n\
                         \x20 -o, --operating-system   print the operating system\n"
                            .to_string(),
                    ));
                }
                a if a.starts_with("--") => return invalid(format!("unrecognized option '{a}'")),
                a if a.starts_with('-') && a.len() > 1 => a[1..].to_string(),
                a => return invalid(format!("extra operand '{a}'")),
            };
            for c in letters.chars() {
                match "snrvmpio".find(c) {
                    Some(i) => want[i] = true,
                    None if c == 'a' => {
                        for (i, w) in want.iter_mut().enumerate() {
                            // -a leaves out -p and -i when unknown; both
                            // are the machine name here, as on Linux's
                            // coreutils builds that know it, but -a
                            // prints them only when asked.
                            if i != 5 && i != 6 {
                                *w = true;
                            }
                        }
                    }
                    None => return invalid(format!("invalid option -- '{c}'")),
                }
            }
        }
        if !want.contains(&true) {
            want[0] = true;
        }
        let n = node();
        let fields = [
            n.sysname.as_str(),
            HOSTNAME,
            n.release.as_str(),
            n.version.as_str(),
            n.machine.as_str(),
            n.machine.as_str(),
            n.machine.as_str(),
            "GNU/Linux",
        ];
        let line: Vec<&str> = fields
            .iter()
            .zip(want)
            .filter_map(|(f, w)| w.then_some(*f))
            .collect();
        Ok(ExecResult::ok(format!("{}\n", line.join(" "))))
    }
}
