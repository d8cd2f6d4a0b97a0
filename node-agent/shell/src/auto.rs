//! Where `--runtime auto` runs a script: in-process in the shell runtime
//! when every command it names is one the shell runtime has, else in the
//! container runtime with real binaries.
//!
//! The script is parsed once with bashkit's parser, by the refusal check
//! of the `refuse` module, whose walk (every command, function body,
//! substitution and here-document) also collects each simple command's
//! literal name and arguments. It stays in the shell runtime only when:
//!
//! - it parses, and the runtime would not refuse it (the `refuse` module);
//! - every command name is a literal the shell runtime has (its builtins,
//!   bashkit's commands, the runtime's own), or a function the script
//!   defines; commands run by `command`, `env`, `timeout`, `xargs`,
//!   `nice`, `nohup`, `sudo`, `busybox`, `flock`, `watch`, `find -exec`
//!   and `time`, and the scripts of `bash -c 'literal'` and `trap
//!   'literal'`, count, and so do names asked about with `which`, `type`,
//!   `command -v` and `hash` (the container has the answer the script is
//!   after);
//! - it uses neither `retry` nor `parallel`, which bashkit only stands in
//!   for (they print the commands they would run);
//! - nothing hides a command from the walk: no computed command name
//!   (`$cmd`), no `eval`, `source` or `.`, no `bash FILE`, no `exec CMD`
//!   (it replaces the shell with a program), no name with a `/` (a file
//!   run by path, `./configure`).
//!
//! Everything else goes to the container. [`Decision::missing`] names the
//! first command the shell runtime lacks, when that is the reason, so a
//! computer without a container can say which command it could not run.

use crate::refuse::{self, Simple, Verdict};
use std::collections::HashSet;
use std::sync::OnceLock;

/// How deep `bash -c 'script'` payloads are followed.
const MAX_NESTING: usize = 4;

/// The runtime [`decide`] picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// In-process, in the shell runtime.
    Shell,
    /// With real binaries, in the container runtime.
    Container,
}

impl Route {
    /// The runtime's name, as in requests and messages.
    pub fn name(self) -> &'static str {
        match self {
            Route::Shell => "shell",
            Route::Container => "container",
        }
    }
}

/// What [`decide`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Where the script runs.
    pub route: Route,
    /// Why, in a few words, for the exec's exit event: `every command is
    /// built into the shell runtime`, `python3 is not a shell runtime
    /// command`, `it runs eval, whose commands are known only at run time`.
    pub reason: String,
    /// The first command the script names that the shell runtime does not
    /// have, when that is why it goes to the container.
    pub missing: Option<String>,
}

impl Decision {
    fn shell() -> Decision {
        Decision {
            route: Route::Shell,
            reason: "every command is built into the shell runtime".into(),
            missing: None,
        }
    }

    fn container(reason: impl Into<String>) -> Decision {
        Decision {
            route: Route::Container,
            reason: reason.into(),
            missing: None,
        }
    }

    fn missing(name: &str) -> Decision {
        Decision {
            route: Route::Container,
            reason: format!("{name} is not a shell runtime command"),
            missing: Some(name.to_string()),
        }
    }
}

/// Decides where `script` runs (see the module doc). The script is parsed
/// once, by the walk of the refusal check, which also collects its
/// commands; nothing runs.
pub fn decide(script: &str) -> Decision {
    decide_nested(script, 0)
}

fn decide_nested(script: &str, depth: usize) -> Decision {
    let (max_depth, max_fuel) = parser_limits();
    let scan = refuse::scan(script, max_depth, max_fuel, true);
    match scan.verdict {
        Verdict::Refuse(refusal) => {
            return Decision::container(format!("the shell runtime refuses {}", refusal.construct));
        }
        Verdict::Unparsed => {
            return Decision::container("the shell runtime's parser does not parse it");
        }
        Verdict::Run { .. } => {}
    }
    let known = shell_commands();
    let functions: HashSet<&str> = scan.functions.iter().map(String::as_str).collect();
    let has = |name: &str| functions.contains(name) || known.contains(name);
    for command in &scan.commands {
        if let Some(decision) = judge(command, &has, depth) {
            return decision;
        }
    }
    if scan.hidden {
        return Decision::container(
            "a command substitution inside `${...}` or `$((...))` is known only at run time",
        );
    }
    Decision::shell()
}

/// The decision one command forces, if any.
fn judge(command: &Simple, has: &dyn Fn(&str) -> bool, depth: usize) -> Option<Decision> {
    let Some(name) = command.name.as_deref() else {
        return (!command.bare)
            .then(|| Decision::container("a command name is computed at run time"));
    };
    let args = &command.args;
    match name {
        "eval" | "source" | "." => {
            return Some(Decision::container(format!(
                "it runs {name}, whose commands are known only at run time"
            )));
        }
        "exec" => {
            return (!args.is_empty())
                .then(|| Decision::container("exec replaces the shell with a program"));
        }
        "bash" | "sh" => return Some(nested_shell(args, depth)),
        _ => {}
    }
    if name.contains('/') {
        return Some(Decision::container(format!(
            "{name} runs a file by its path"
        )));
    }
    if !has(name) {
        return Some(Decision::missing(name));
    }
    if name == "git" {
        // The words known before the first one computed at run time.
        let known: Vec<String> = args.iter().map_while(Clone::clone).collect();
        if let Some(sub) = agentcomputer_git::subcommand(&known)
            && !agentcomputer_git::has_subcommand(sub)
        {
            return Some(Decision::container(format!(
                "git {sub} is not in the shell runtime's git"
            )));
        }
    }
    match wrapped(name, args) {
        Wrapped::None => {}
        Wrapped::Stub => return Some(stub(name)),
        Wrapped::Command(i) => {
            // What timeout, env, xargs, sudo, nohup and the like run is a
            // program, never one of the script's functions.
            let inner = Simple {
                name: args[i].clone(),
                bare: false,
                args: args[i + 1..].to_vec(),
            };
            let known = shell_commands();
            return judge(&inner, &|n: &str| known.contains(n), depth);
        }
        Wrapped::Script(script) => {
            let inner = nested(script, depth);
            if inner.route == Route::Container {
                return Some(inner);
            }
        }
        Wrapped::Dynamic => {
            return Some(Decision::container(format!(
                "{name} runs a command computed at run time"
            )));
        }
        Wrapped::Names(names) => {
            for inner in names {
                if inner.contains('/') {
                    return Some(Decision::container(format!(
                        "{inner} runs a file by its path"
                    )));
                }
                if matches!(inner, "retry" | "parallel") {
                    return Some(stub(inner));
                }
                if matches!(inner, "eval" | "source" | "." | "exec" | "bash" | "sh") {
                    return Some(Decision::container(format!(
                        "{name} runs {inner}, whose commands are known only at run time"
                    )));
                }
                if !has(inner) {
                    return Some(Decision::missing(inner));
                }
            }
        }
    }
    None
}

/// bashkit's `retry` and `parallel` only print the commands they would
/// run: a script using them needs the real tools, and is refused where
/// there is no container (as a missing command is).
fn stub(name: &str) -> Decision {
    Decision {
        route: Route::Container,
        reason: format!("{name} in the shell runtime only reports the commands it would run"),
        missing: Some(name.to_string()),
    }
}

/// `bash -c 'literal script'` is decided like the script; any other
/// nested shell (a file, stdin, a computed script) goes to the container.
fn nested_shell(args: &[Option<String>], depth: usize) -> Decision {
    let opaque = || Decision::container("it runs a nested shell whose script is not in the text");
    let mut rest = args.iter();
    let payload = loop {
        match rest.next() {
            // `-o pipefail`, `+O extglob`: an option and its value.
            Some(Some(flag)) if matches!(flag.as_str(), "-o" | "+o" | "-O" | "+O") => {
                rest.next();
            }
            // `-c`, and `-lc`, `-ec`: short options ending in `c`.
            Some(Some(flag))
                if flag.starts_with('-') && !flag.starts_with("--") && flag.ends_with('c') =>
            {
                match rest.next() {
                    Some(Some(script)) => break script,
                    _ => return opaque(),
                }
            }
            Some(Some(flag))
                if (flag.starts_with('-') || flag.starts_with('+')) && flag.len() > 1 => {}
            _ => return opaque(),
        }
    };
    nested(payload, depth)
}

/// The decision for a script another one runs from a literal string
/// (`bash -c`, `trap`, `flock -c`, `watch`). It sees none of the outer
/// script's functions: only its own names count.
fn nested(script: &str, depth: usize) -> Decision {
    if depth >= MAX_NESTING {
        return Decision::container("its nested scripts go deeper than the decision follows");
    }
    decide_nested(script, depth + 1)
}

/// The commands a wrapper runs, as far as its literal arguments say.
enum Wrapped<'a> {
    /// Not a wrapper, or one that runs nothing here (`xargs` alone runs
    /// `echo`, `command -v` only looks).
    None,
    /// It runs a command whose name is not a literal.
    Dynamic,
    /// It runs this literal script (`trap 'cmd' EXIT`, `flock f -c 'cmd'`,
    /// `watch 'cmd'`).
    Script(&'a str),
    /// bashkit's stand-in that only prints the commands it would run
    /// (`retry`, `parallel`): the script needs the real tool.
    Stub,
    /// The names it runs (`find -exec`) or asks about (`which`).
    Names(Vec<&'a str>),
    /// It runs the command whose name is the argument at this index, with
    /// the arguments after it (`timeout 5 CMD ...`, `env A=1 CMD ...`).
    Command(usize),
}

fn wrapped<'a>(name: &str, args: &'a [Option<String>]) -> Wrapped<'a> {
    let literal = |i: usize| args.get(i).and_then(|a| a.as_deref());
    // The first non-option operand at or after `from`, skipping options
    // listed in `with_value` together with their value.
    let operand = |from: usize, with_value: &[&str]| -> Result<Option<usize>, ()> {
        let mut i = from;
        while i < args.len() {
            let Some(arg) = literal(i) else {
                return Err(());
            };
            if arg == "--" {
                return Ok((i + 1 < args.len()).then_some(i + 1));
            }
            if !arg.starts_with('-') || arg == "-" {
                return Ok(Some(i));
            }
            i += if with_value.contains(&arg) { 2 } else { 1 };
        }
        Ok(None)
    };
    let one = |at: Result<Option<usize>, ()>| match at {
        Err(()) => Wrapped::Dynamic,
        Ok(None) => Wrapped::None,
        Ok(Some(i)) => match literal(i) {
            Some(_) => Wrapped::Command(i),
            None => Wrapped::Dynamic,
        },
    };
    match name {
        "command" => {
            let looks = args
                .iter()
                .take_while(|a| a.as_deref().is_some_and(|a| a.starts_with('-')))
                .any(|a| {
                    a.as_deref()
                        .is_some_and(|a| a.contains('v') || a.contains('V'))
                });
            if looks {
                queried(args)
            } else {
                one(operand(0, &[]))
            }
        }
        "which" | "type" | "hash" => queried(args),
        "retry" | "parallel" => Wrapped::Stub,
        "busybox" => one(operand(0, &[])),
        "sudo" => {
            let with_value = ["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"];
            match operand(0, &with_value) {
                // `sudo VAR=VALUE ... cmd`.
                Ok(Some(mut i)) => {
                    while literal(i).is_some_and(|a| a.contains('=')) {
                        i += 1;
                    }
                    one(Ok((i < args.len()).then_some(i)))
                }
                other => one(other),
            }
        }
        "trap" => match args.first() {
            // `trap -- 'cmd' EXIT`: the script follows the `--`.
            Some(Some(first)) if first == "--" => match args.get(1) {
                Some(Some(script)) if !script.is_empty() => Wrapped::Script(script),
                Some(None) => Wrapped::Dynamic,
                _ => Wrapped::None,
            },
            Some(Some(first)) if first.starts_with('-') || first.is_empty() => Wrapped::None,
            Some(Some(script)) => Wrapped::Script(script),
            Some(None) => Wrapped::Dynamic,
            None => Wrapped::None,
        },
        "flock" => {
            let with_value = ["-w", "-E", "--timeout", "--conflict-exit-code"];
            if let Some(at) = args.iter().position(|a| a.as_deref() == Some("-c")) {
                return match literal(at + 1) {
                    Some(script) => Wrapped::Script(script),
                    None => Wrapped::Dynamic,
                };
            }
            match operand(0, &with_value) {
                // The first operand is the lock file; the command follows.
                Ok(Some(file)) => one(operand(file + 1, &[])),
                other => one(other),
            }
        }
        "watch" => {
            let direct = args.iter().any(|a| a.as_deref() == Some("-x"));
            match operand(0, &["-n", "--interval"]) {
                Ok(Some(i)) if !direct && args.len() == i + 1 => match literal(i) {
                    Some(script) => Wrapped::Script(script),
                    None => Wrapped::Dynamic,
                },
                other => one(other),
            }
        }
        "nice" => one(operand(0, &["-n"])),
        "nohup" | "builtin" => one(operand(0, &[])),
        "timeout" => match operand(0, &["-s", "-k", "--signal", "--kill-after"]) {
            // The first operand is the duration; the command follows it.
            Ok(Some(duration)) => one(operand(duration + 1, &[])),
            other => one(other),
        },
        "env" => {
            let mut i = 0;
            while i < args.len() {
                match literal(i) {
                    None => return Wrapped::Dynamic,
                    Some("-u" | "-C" | "-S" | "--unset" | "--chdir") => i += 2,
                    Some(a) if a.starts_with('-') || a.contains('=') => i += 1,
                    Some(_) => return one(Ok(Some(i))),
                }
            }
            Wrapped::None
        }
        "xargs" => one(operand(
            0,
            &[
                "-I",
                "-i",
                "-n",
                "-P",
                "-L",
                "-l",
                "-d",
                "-s",
                "-a",
                "-E",
                "-e",
                "--max-args",
                "--max-procs",
                "--delimiter",
                "--arg-file",
            ],
        )),
        "find" => {
            let mut names = Vec::new();
            for (i, arg) in args.iter().enumerate() {
                if matches!(
                    arg.as_deref(),
                    Some("-exec" | "-execdir" | "-ok" | "-okdir")
                ) {
                    match literal(i + 1) {
                        Some(inner) => names.push(inner),
                        None => return Wrapped::Dynamic,
                    }
                }
            }
            if names.is_empty() {
                Wrapped::None
            } else {
                Wrapped::Names(names)
            }
        }
        _ => Wrapped::None,
    }
}

/// The names `which`, `type`, `hash` and `command -v` ask about: their
/// non-option literal operands (a computed one is left alone: asking runs
/// nothing).
fn queried(args: &[Option<String>]) -> Wrapped<'_> {
    let names: Vec<&str> = args
        .iter()
        .filter_map(|a| a.as_deref())
        .filter(|a| !a.starts_with('-'))
        .collect();
    if names.is_empty() {
        Wrapped::None
    } else {
        Wrapped::Names(names)
    }
}

/// The parser's depth and operation limits of a shell run.
fn parser_limits() -> (usize, usize) {
    static LIMITS: OnceLock<(usize, usize)> = OnceLock::new();
    *LIMITS.get_or_init(|| {
        let limits = crate::ShellLimits::default().execution(std::time::Duration::from_secs(1), 1);
        (limits.max_ast_depth, limits.max_parser_operations)
    })
}

/// Every command name the shell runtime answers: bashkit's builtins as the
/// runtime configures them (special builtins included) and the runtime's
/// own commands. Built once.
pub fn shell_commands() -> &'static HashSet<String> {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let builder = crate::session::configure(bashkit::Bash::builder());
        let builder = crate::python::install(
            builder,
            &crate::ShellLimits::default(),
            std::time::Duration::from_secs(1),
            1,
        );
        let mut names: HashSet<String> = builder.build().builtin_names().into_iter().collect();
        names.extend(crate::builtins::OWN_COMMANDS.iter().map(|n| n.to_string()));
        names
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(script: &str) -> Route {
        decide(script).route
    }

    #[test]
    fn built_in_pipelines_stay_in_process() {
        for script in [
            "grep -rn TODO src | wc -l",
            "ls | wc -l",
            "f() { echo hi; }; f",
            "x=1; echo $x",
            "find . -name '*.rs' -exec wc -l {} +",
            "timeout 5 sleep 1",
            "env A=1 printenv A",
            "bash -c 'echo nested | tr a-z A-Z'",
            "exec 2>&1; echo hi",
            "command -v grep",
            "trap 'rm -f /tmp/x' EXIT; echo hi",
            "sudo -u app ls",
            "flock /tmp/l -c 'echo locked'",
            "bash -lc 'echo login'",
        ] {
            assert_eq!(
                route(script),
                Route::Shell,
                "{script}: {:?}",
                decide(script)
            );
        }
    }

    #[test]
    fn git_stays_in_the_shell_unless_its_subcommand_is_missing_there() {
        for script in [
            "git status --short",
            "git -C repo log --oneline -5",
            "git add -A && git commit -qm x",
        ] {
            assert_eq!(
                route(script),
                Route::Shell,
                "{script}: {:?}",
                decide(script)
            );
        }
        let d = decide("git status && git rebase origin/main");
        assert_eq!(d.route, Route::Container);
        assert!(d.reason.contains("git rebase"), "{}", d.reason);
    }

    #[test]
    fn real_binaries_go_to_the_container_and_are_named() {
        for (script, name) in [
            ("python3 -m pytest", "python3"),
            ("npm test", "npm"),
            ("make", "make"),
            ("cd src && gcc -o a a.c", "gcc"),
            ("f() { svn status; }; f", "svn"),
            ("echo $(node -v)", "node"),
            ("timeout 60 cargo build", "cargo"),
            ("find . -name '*.py' -exec python3 {} \\;", "python3"),
            ("trap 'rm -rf build; node cleanup.js' EXIT", "node"),
            ("sudo -u app pip install x", "pip"),
            ("flock /tmp/l -c 'make all'", "make"),
            ("bash -lc 'npm ci'", "npm"),
            ("bash -o pipefail -c 'cargo test | tee log'", "cargo"),
            ("ls | xargs -n1 pip show", "pip"),
            ("bash -c 'go test ./...'", "go"),
            ("which python3", "python3"),
            ("env FOO=1 node x.js", "node"),
            ("timeout 5 env A=1 python3 x.py", "python3"),
            ("nohup timeout 9 npm test", "npm"),
            ("f() { echo hi; }; timeout 5 f", "f"),
            ("trap -- 'node cleanup.js' EXIT", "node"),
            ("retry -n 3 -- curl -f http://x", "retry"),
            ("parallel gzip ::: a b", "parallel"),
            ("timeout 600 parallel gzip ::: a b", "parallel"),
            ("env retry -n 2 -- ls", "retry"),
            ("find . -exec parallel echo {} \\;", "parallel"),
        ] {
            let decision = decide(script);
            assert_eq!(decision.route, Route::Container, "{script}");
            assert_eq!(decision.missing.as_deref(), Some(name), "{script}");
            assert!(decision.reason.contains(name), "{}", decision.reason);
        }
    }

    #[test]
    fn what_cannot_be_named_goes_to_the_container_without_a_name() {
        for script in [
            "cmd=ls; $cmd",
            "echo ${v:-$(node -v)}",
            "eval \"echo hi\"",
            "source env.sh",
            ". ./env.sh",
            "bash build.sh",
            "exec python3 x.py",
            "./configure",
            "echo $x | xargs $tool",
            "[[ -L link ]] && echo link",
            "if then fi",
            "if (( $(python3 -c 'print(1)') )); then echo deploy; else echo skip; fi",
            "for (( i = `nproc`; i > 0; i-- )); do echo $i; done",
        ] {
            let decision = decide(script);
            assert_eq!(decision.route, Route::Container, "{script}: {decision:?}");
            assert_eq!(decision.missing, None, "{script}");
        }
    }

    /// The list the decision reads is exactly what a run's interpreter
    /// answers, so the two cannot drift apart.
    #[test]
    fn the_command_list_is_the_interpreters() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = agentcomputer_fs::Fs::create(&dir.path().join("c.db"), Default::default())
            .expect("engine");
        let engine = crate::engine_fs::EngineFs::new(fs);
        let budget = crate::budget::ExecBudget {
            memory: 1 << 20,
            stop: crate::stop::StopFlag::new(),
            deadline: None,
            timed_out: Default::default(),
        };
        let network = crate::builtins::http::Network {
            policy: Default::default(),
            max_download_bytes: 1,
        };
        let limits = crate::ShellLimits::default();
        let builder = crate::session::commands(
            &engine,
            &budget,
            network,
            &limits,
            std::time::Duration::from_secs(1),
            1,
        );
        let names: HashSet<String> = builder.build().builtin_names().into_iter().collect();
        assert_eq!(&names, shell_commands());
    }

    #[test]
    fn the_command_list_holds_builtins_and_the_runtimes_own() {
        let names = shell_commands();
        for name in [
            "cd", "eval", "export", "grep", "jq", "awk", "curl", "wget", "ls", "[", "git",
        ] {
            assert!(names.contains(name), "{name}");
        }
        for name in ["python3", "node", "npm", "pip", "make", "gcc"] {
            assert!(!names.contains(name), "{name}");
        }
    }
}
