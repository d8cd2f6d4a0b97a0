//! `git config [--global | --local] [--get | --get-all | --unset | --list]
//! KEY [VALUE]` (see [`crate::config`] for where `--global` lives).

use super::unknown_option;
use crate::config::{ConfigFile, GLOBAL};
use crate::error::{Error, Result};
use crate::files::join;
use crate::{Invocation, Output};

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let mut global = false;
    let mut action = "";
    let mut rest = Vec::new();
    for a in args {
        match a.as_str() {
            "--global" => global = true,
            "--local" => global = false,
            "--get" => action = "get",
            "--get-all" => action = "get-all",
            "--unset" => action = "unset",
            "-l" | "--list" => action = "list",
            "--add" => action = "add",
            "--bool" | "--int" | "--path" | "--type=bool" | "--type=int" => {}
            _ if a.starts_with('-') => return Err(unknown_option("config", a)),
            _ => rest.push(a.clone()),
        }
    }
    let path = if global {
        GLOBAL.to_vec()
    } else {
        match super::open(inv) {
            Ok(r) => join(&r.git_dir, b"config"),
            // Reading outside a repository falls back to the global file.
            Err(_) if !rest.is_empty() && rest.len() == 1 && action != "unset" => GLOBAL.to_vec(),
            Err(_) if action == "list" => GLOBAL.to_vec(),
            Err(e) => return Err(e),
        }
    };
    let mut file = ConfigFile::load(&inv.files, &path)?;
    if action == "list" {
        let mut text = String::new();
        if !global && path != GLOBAL {
            for (k, v) in ConfigFile::load(&inv.files, GLOBAL)?.list() {
                text.push_str(&format!("{k}={v}\n"));
            }
        }
        for (k, v) in file.list() {
            text.push_str(&format!("{k}={v}\n"));
        }
        out.stdout.extend_from_slice(text.as_bytes());
        return Ok(0);
    }
    let Some(key) = rest.first() else {
        return Err(Error::Usage("usage: git config [<options>]".into()));
    };
    let key = key.to_string();
    match (action, rest.get(1)) {
        ("unset", _) => Ok(if file.unset(&key)? {
            file.save(&inv.files)?;
            0
        } else {
            5
        }),
        ("get-all", _) => {
            let mut values = file.get_all(&key);
            if !global && values.is_empty() {
                values = ConfigFile::load(&inv.files, GLOBAL)?.get_all(&key);
            }
            for v in &values {
                out.stdout.extend_from_slice(format!("{v}\n").as_bytes());
            }
            Ok(if values.is_empty() { 1 } else { 0 })
        }
        ("get", _) | ("", None) => {
            let value = file.get(&key).or_else(|| {
                if global {
                    None
                } else {
                    ConfigFile::load(&inv.files, GLOBAL).ok()?.get(&key)
                }
            });
            match value {
                Some(v) => {
                    out.stdout.extend_from_slice(format!("{v}\n").as_bytes());
                    Ok(0)
                }
                None => Ok(1),
            }
        }
        (_, Some(value)) => {
            file.set(&key, value)?;
            file.save(&inv.files)?;
            Ok(0)
        }
        _ => Err(Error::Usage("usage: git config [<options>]".into())),
    }
}
