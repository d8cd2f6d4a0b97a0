//! Bash language features, each checked on real output over an engine
//! computer.

mod common;

use common::Computer;

#[tokio::test]
async fn pipes_and_pipelines() {
    let c = Computer::new();
    let out = c
        .sh("printf 'b\\na\\nc\\na\\n' | sort | uniq -c | sort -rn | head -1")
        .await;
    assert_eq!(out.ok().trim(), "2 a");
}

#[tokio::test]
async fn redirections() {
    let c = Computer::new();
    let out = c
        .sh(
            "echo one > f; echo two >> f; cat < f; ls nope 2> err; cat err | wc -l; \
             echo both &> g; cat g; echo x 1>&2",
        )
        .await;
    assert_eq!(out.code(), 0);
    assert_eq!(out.stdout(), "one\ntwo\n1\nboth\n");
    assert_eq!(out.stderr(), "x\n");
    assert_eq!(c.read("f"), b"one\ntwo\n");
}

#[tokio::test]
async fn here_docs_and_here_strings() {
    let c = Computer::new();
    let out = c
        .sh("name=world\ncat <<EOF\nhello $name\nEOF\ncat <<'RAW'\n$name stays\nRAW\ntr a-z A-Z <<< \"$name\"")
        .await;
    assert_eq!(out.ok(), "hello world\n$name stays\nWORLD\n");
}

#[tokio::test]
async fn variables_and_expansions() {
    let c = Computer::new();
    let out = c
        .sh(r#"x=hello; y=${x^^}; z=${x/l/L}; unset w; echo "$y $z ${w:-dflt} ${#x} ${x:1:3}"; f=a.tar.gz; echo ${f%%.*} ${f#*.}"#)
        .await;
    assert_eq!(out.ok(), "HELLO heLlo dflt 5 ell\na tar.gz\n");
}

#[tokio::test]
async fn arrays_indexed_and_associative() {
    let c = Computer::new();
    let out = c
        .sh(r#"a=(x y z); a+=(w); echo ${#a[@]} ${a[2]} "${a[@]:1:2}"
declare -A m; m[k1]=v1; m[k2]=v2; for k in $(printf '%s\n' "${!m[@]}" | sort); do echo "$k=${m[$k]}"; done"#)
        .await;
    assert_eq!(out.ok(), "4 z y z\nk1=v1\nk2=v2\n");
}

#[tokio::test]
async fn functions_locals_and_return() {
    let c = Computer::new();
    let out = c
        .sh("g=1\nf() { local g=2; echo \"in $g $1\"; return 7; }\nf arg; echo \"rc $? g $g\"")
        .await;
    assert_eq!(out.ok(), "in 2 arg\nrc 7 g 1\n");
}

#[tokio::test]
async fn loops() {
    let c = Computer::new();
    let out = c
        .sh("for i in 1 2 3; do printf $i; done; echo\n\
             for ((i=0;i<3;i++)); do printf $i; done; echo\n\
             n=0; while [ $n -lt 3 ]; do n=$((n+1)); done; echo $n\n\
             until [ $n -eq 0 ]; do n=$((n-1)); [ $n -eq 1 ] && break; done; echo $n\n\
             printf 'a\\nb\\n' > l; while read -r line; do echo \"<$line>\"; done < l")
        .await;
    assert_eq!(out.ok(), "123\n012\n3\n1\n<a>\n<b>\n");
}

#[tokio::test]
async fn a_loop_of_fifty_thousand_iterations_is_allowed() {
    // bashkit's default loop budget (10 000) would stop this.
    let c = Computer::new();
    let out = c
        .sh("n=0; for ((i=0;i<50000;i++)); do n=$((n+1)); done; echo $n")
        .await;
    assert_eq!(out.ok(), "50000\n");
}

#[tokio::test]
async fn conditionals_and_case() {
    let c = Computer::new();
    let out = c
        .sh(r#"touch f; if [[ -f f && ! -d f ]]; then echo file; elif true; then echo no; else echo no; fi
[[ "abc" =~ ^a(b)c$ ]] && echo "m ${BASH_REMATCH[1]}"
case "x.rs" in *.py) echo py;; *.rs) echo rust;; *) echo other;; esac
[ 3 -gt 2 ] || echo never; test -z "" && echo empty"#)
        .await;
    assert_eq!(out.ok(), "file\nm b\nrust\nempty\n");
}

#[tokio::test]
async fn arithmetic() {
    let c = Computer::new();
    let out = c
        .sh("echo $((7 / 2)) $((7 % 3)) $((2 ** 10)) $((0x10 + 010)) $(( (1 << 4) | 1 )); let x=5*3; echo $x; ((x > 10)) && echo big")
        .await;
    assert_eq!(out.ok(), "3 1 1024 24 17\n15\nbig\n");
}

#[tokio::test]
async fn globbing() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p src/a src/b; touch src/a/x.rs src/b/y.rs src/z.txt; echo src/*/*.rs; echo src/*.{txt,md}; \
             shopt -s globstar; echo src/**/*.rs; echo nomatch*")
        .await;
    assert_eq!(
        out.ok(),
        "src/a/x.rs src/b/y.rs\nsrc/z.txt src/*.md\nsrc/a/x.rs src/b/y.rs\nnomatch*\n"
    );
}

#[tokio::test]
async fn command_substitution_and_subshells() {
    let c = Computer::new();
    let out = c
        .sh("x=$(echo inner | tr a-z A-Z); y=`echo back`; echo $x $y; (cd /tmp && pwd); pwd; echo $(( $(echo 2) + 3 ))")
        .await;
    assert_eq!(out.ok(), "INNER back\n/tmp\n/workspace\n5\n");
}

#[tokio::test]
async fn exit_codes_follow_bash() {
    let c = Computer::new();
    assert_eq!(c.sh("exit 3").await.code(), 3);
    assert_eq!(c.sh("false").await.code(), 1);
    assert_eq!(c.sh("true").await.code(), 0);
    let missing = c.sh("no-such-command --flag").await;
    assert_eq!(missing.code(), 127);
    assert!(
        missing.stderr().contains("command not found"),
        "{}",
        missing.stderr()
    );
    let syntax = c.sh("if then fi").await;
    assert_eq!(syntax.code(), 2);
    assert!(
        syntax.stderr().contains("syntax error"),
        "{}",
        syntax.stderr()
    );
    assert_eq!(syntax.outcome.error, None);
    assert_eq!(c.sh("set -e; false; echo unreachable").await.code(), 1);
    assert_eq!(c.sh("false | true").await.code(), 0);
    assert_eq!(c.sh("set -o pipefail; false | true").await.code(), 1);
}

#[tokio::test]
async fn env_stdin_and_cwd_from_the_request() {
    use agentcomputer_shell::ExecRequest;
    let c = Computer::new();
    c.sh("mkdir -p proj/sub").await.ok();
    let out = c
        .exec(ExecRequest {
            script: "echo \"$GREETING\"; pwd; cat; echo".into(),
            cwd: "proj/sub".into(),
            env: vec![("GREETING".into(), "hi there".into())],
            stdin: b"from stdin".to_vec(),
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.ok(), "hi there\n/workspace/proj/sub\nfrom stdin\n");
}

#[tokio::test]
async fn a_missing_cwd_is_a_clear_error() {
    use agentcomputer_shell::ExecRequest;
    let c = Computer::new();
    let out = c
        .exec(ExecRequest {
            script: "echo never".into(),
            cwd: "missing".into(),
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.code(), 1);
    assert_eq!(out.stdout(), "");
    let error = out.outcome.error.clone().expect("error message");
    assert!(
        error.contains("/workspace/missing: No such file or directory"),
        "{error}"
    );
    assert!(out.stderr().contains(&error));
}
