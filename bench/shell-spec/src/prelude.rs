//! The helper programs the spec cases call, as shell functions.
//!
//! The Oils suite ships them as Python scripts (`spec/bin/argv.py` prints
//! its arguments as a Python 2 `repr` of a list of byte strings,
//! `printenv.py` prints each named environment variable or `None`,
//! `stdout_stderr.py [OUT [ERR [STATUS]]]` writes to both streams,
//! `read_from_fd.py FD...` prints `FD: contents` per descriptor). The shell
//! runtime has no way to register host commands, so every shell under test
//! gets the same functions in front of each case, keeping the comparison
//! fair. The prelude is one line that the case's first line continues, so
//! `$LINENO` and error line numbers match the spec file's expectations.

/// Shell text put in front of every case (same line as its first line),
/// for all three shells. Ends with `; `.
pub const PRELUDE: &str = concat!(
    // Python 2 repr of one argument's bytes. Under LC_ALL=C bash yields
    // bytes; a shell without a byte locale yields code points, which are
    // UTF-8-encoded here (the probe tells the two apart).
    r#"__py_repr() { local __s=$1 __q="'" __o='' __b __c __n __h __w __bytes=0; "#,
    r#"case $__s in *"'"*) case $__s in *'"'*) ;; *) __q='"' ;; esac ;; esac; "#,
    r#"local LC_ALL=C; __w=$'\xe2\x98\xa0'; printf -v __n '%d' "'${__w:0:1}"; ((__n == 226 || __n == -30)) && __bytes=1; "#,
    r#"while [ -n "$__s" ]; do __c=${__s:0:1}; __s=${__s:1}; printf -v __n '%d' "'$__c"; ((__n < 0)) && ((__n += 256)); "#,
    r#"if ((__n == 92)); then __o+='\\'; elif [ "$__c" = "$__q" ]; then __o+="\\$__q"; "#,
    r#"elif ((__n == 9)); then __o+='\t'; elif ((__n == 10)); then __o+='\n'; elif ((__n == 13)); then __o+='\r'; "#,
    r#"elif ((__n < 32 || __n == 127)); then printf -v __h '%02x' "$__n"; __o+="\\x$__h"; "#,
    r#"elif ((__n < 127)); then __o+=$__c; "#,
    r#"elif ((__n < 128 || (__bytes && __n < 256))); then printf -v __h '%02x' "$__n"; __o+="\\x$__h"; "#,
    r#"elif ((__n < 0x800)); then for __b in $((0xc0 | __n >> 6)) $((0x80 | (__n & 63))); do printf -v __h '%02x' "$__b"; __o+="\\x$__h"; done; "#,
    r#"elif ((__n < 0x10000)); then for __b in $((0xe0 | __n >> 12)) $((0x80 | (__n >> 6 & 63))) $((0x80 | (__n & 63))); do printf -v __h '%02x' "$__b"; __o+="\\x$__h"; done; "#,
    r#"else for __b in $((0xf0 | __n >> 18)) $((0x80 | (__n >> 12 & 63))) $((0x80 | (__n >> 6 & 63))) $((0x80 | (__n & 63))); do printf -v __h '%02x' "$__b"; __o+="\\x$__h"; done; fi; "#,
    r#"done; printf '%s' "$__q$__o$__q"; }; "#,
    r#"argv.py() { local __o='[' __sep='' __a; for __a in "$@"; do __o+="$__sep$(__py_repr "$__a")"; __sep=', '; done; printf '%s]\n' "$__o"; }; "#,
    r#"printenv.py() { local __v; for __v in "$@"; do printenv "$__v" 2>/dev/null || echo None; done; }; "#,
    r#"stdout_stderr.py() { echo "${1-STDOUT}"; echo "${2-STDERR}" >&2; return "${3-0}"; }; "#,
    r#"read_from_fd.py() { local __fd __c; for __fd in "$@"; do __c=$(cat <&"$__fd"); echo "$__fd: $__c"; done; }; "#,
    "true; ",
);

/// `script` with [`PRELUDE`] in front of its first line.
pub fn wrap(script: &str) -> String {
    format!("{PRELUDE}{script}")
}
