//! The commands agents use, each with an assertion on its real output,
//! working on files stored in the engine.

mod common;

use common::Computer;

/// A computer with a small text file `data.txt` (5 lines).
fn with_data() -> Computer {
    let c = Computer::new();
    c.write(
        "data.txt",
        b"apple 3\nbanana 1\ncherry 2\napple 5\ndate 4\n",
    );
    c
}

#[tokio::test]
async fn ls_lists_names_sizes_and_kinds() {
    let c = with_data();
    let out = c
        .sh("mkdir d; ln -s data.txt l; ls; ls -1 -F; ls -l data.txt")
        .await;
    let text = out.ok();
    assert!(
        text.starts_with("d\ndata.txt\nl\nd/\ndata.txt\nl@\n"),
        "{text}"
    );
    let long = text.lines().last().unwrap();
    assert!(long.starts_with("-rw-r--r--"), "{long}");
    assert!(long.contains(" 41 "), "{long}");
    assert!(long.ends_with("data.txt"), "{long}");
}

#[tokio::test]
async fn cat_head_tail_wc() {
    let c = with_data();
    let out = c
        .sh("cat -n data.txt | head -2; head -n 1 data.txt; tail -n 2 data.txt; tail -c 7 data.txt; wc -l data.txt; wc -w < data.txt; wc -c data.txt")
        .await;
    assert_eq!(
        out.ok(),
        "     1\tapple 3\n     2\tbanana 1\napple 3\napple 5\ndate 4\ndate 4\n5 data.txt\n10\n41 data.txt\n"
    );
}

#[tokio::test]
async fn grep_variants() {
    let c = with_data();
    let out = c
        .sh("grep -n apple data.txt; grep -c an data.txt; grep -v a data.txt; grep -E '^(b|c)' data.txt; \
             mkdir -p src; echo 'fn main() {}' > src/m.rs; grep -rl 'fn main' .; grep -q zzz data.txt; echo rc=$?")
        .await;
    assert_eq!(
        out.ok(),
        "1:apple 3\n4:apple 5\n1\ncherry 2\nbanana 1\ncherry 2\n./src/m.rs\nrc=1\n"
    );
}

#[tokio::test]
async fn sed_edits_in_place() {
    let c = with_data();
    let out = c
        .sh("sed -n '2,3p' data.txt; sed 's/apple/APPLE/g' data.txt | head -1; sed -i 's/banana/BANANA/' data.txt; sed -n 2p data.txt")
        .await;
    assert_eq!(out.ok(), "banana 1\ncherry 2\nAPPLE 3\nBANANA 1\n");
    assert!(c.read("data.txt").starts_with(b"apple 3\nBANANA 1\n"));
}

#[tokio::test]
async fn awk_fields_and_sums() {
    let c = with_data();
    let out = c
        .sh("awk '{s+=$2} END {print s}' data.txt; awk '$1==\"apple\" {print $2}' data.txt; awk -F: '{print NF}' <<< 'a:b:c'")
        .await;
    assert_eq!(out.ok(), "15\n3\n5\n3\n");
}

#[tokio::test]
async fn sort_uniq_cut_tr() {
    let c = with_data();
    let out = c
        .sh("cut -d' ' -f1 data.txt | sort | uniq; sort -k2 -n data.txt | head -1; cut -c1-3 data.txt | head -1; echo 'Hello World' | tr -d o | tr ' ' _")
        .await;
    assert_eq!(
        out.ok(),
        "apple\nbanana\ncherry\ndate\nbanana 1\napp\nHell_Wrld\n"
    );
}

#[tokio::test]
async fn find_and_xargs() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p a/b; touch a/1.txt a/b/2.txt a/b/3.log; find . -name '*.txt' | sort; find a -type d | sort; \
             find . -name '*.txt' -print0 | xargs -0 -n1 basename | sort; echo x y z | xargs -n 1 echo item")
        .await;
    assert_eq!(
        out.ok(),
        "./a/1.txt\n./a/b/2.txt\na\na/b\n1.txt\n2.txt\nitem x\nitem y\nitem z\n"
    );
}

#[tokio::test]
async fn jq_queries_json_files() {
    let c = Computer::new();
    c.write(
        "p.json",
        br#"{"name":"agent","deps":[{"n":"a","v":1},{"n":"b","v":2}]}"#,
    );
    let out = c
        .sh("jq -r .name p.json; jq '[.deps[].v] | add' p.json; jq -c '.deps | map(select(.v > 1))' p.json; echo '{\"a\":1}' | jq '.a + 1'")
        .await;
    assert_eq!(out.ok(), "agent\n3\n[{\"n\":\"b\",\"v\":2}]\n2\n");
}

#[tokio::test]
async fn mkdir_rm_cp_mv_touch() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p x/y/z; touch x/y/z/f; cp x/y/z/f x/g; cp -r x w; mv x/g x/h; rm -r x/y; ls -R x w | tr '\\n' ' '; \
             rm x/h; rmdir x; [ -e x ] || echo gone")
        .await;
    // Directory operands are listed in sorted order, as GNU ls does.
    assert_eq!(out.ok(), "w: g y  w/y: z  w/y/z: f  x: h gone\n");
    assert!(
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"w/y/z/f", true)
            .is_ok()
    );
}

#[tokio::test]
async fn ln_makes_symlinks() {
    let c = Computer::new();
    let out = c
        .sh("echo target > t; ln -s t s; readlink s; cat s; echo more >> s; cat t; [ -L s ] && echo link; ln -sf t s && echo forced")
        .await;
    assert_eq!(out.ok(), "t\ntarget\ntarget\nmore\nlink\nforced\n");
    let attr =
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"s", false)
            .unwrap();
    assert_eq!(attr.kind, agentcomputer_fs::FileKind::Symlink);
}

#[tokio::test]
async fn mkfifo_makes_an_engine_fifo_that_buffers_within_an_exec() {
    let c = Computer::new();
    let out = c
        .sh("mkfifo p; stat -c %a p; echo hi > p; echo there >> p; cat p; cat p | wc -c")
        .await;
    assert_eq!(out.ok(), "644\nhi\nthere\n0\n");
    let attr =
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"p", false)
            .unwrap();
    assert_eq!(attr.kind, agentcomputer_fs::FileKind::NamedPipe);
}

#[tokio::test]
async fn chmod_changes_the_engine_mode() {
    let c = Computer::new();
    let out = c
        .sh("echo 'echo ran' > s.sh; chmod 755 s.sh; [ -x s.sh ] && echo exec; chmod u-w s.sh; stat -c %a s.sh")
        .await;
    assert_eq!(out.ok(), "exec\n555\n");
    let attr =
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"s.sh", true)
            .unwrap();
    assert_eq!(attr.perm, 0o555);
}

#[tokio::test]
async fn echo_printf_test() {
    let c = Computer::new();
    let out = c
        .sh(r#"echo -n a; echo -e 'b\tc'; printf '%05.1f|%-4s|%x\n' 3.14159 ab 255; test 1 -lt 2 && echo lt; test -n "" || echo empty"#)
        .await;
    assert_eq!(out.ok(), "ab\tc\n003.1|ab  |ff\nlt\nempty\n");
}

#[tokio::test]
async fn date_formats_a_given_time() {
    let c = Computer::new();
    let out = c
        .sh("date -u -d @86400 +%Y-%m-%dT%H:%M:%S; date +%Y | grep -cE '^20[0-9]{2}$'")
        .await;
    assert_eq!(out.ok(), "1970-01-02T00:00:00\n1\n");
}

#[tokio::test]
async fn base64_and_sha256sum() {
    let c = Computer::new();
    let out = c
        .sh("printf 'hello' > h; base64 h; base64 h | base64 -d; echo; sha256sum h")
        .await;
    assert_eq!(
        out.ok(),
        "aGVsbG8=\nhello\n2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824  h\n"
    );
}

#[tokio::test]
async fn diff_reports_changes() {
    let c = Computer::new();
    let out = c.sh("printf 'a\\nb\\nc\\n' > 1; printf 'a\\nB\\nc\\n' > 2; diff 1 2; echo rc=$?; diff -u 1 2 | tail -3").await;
    assert_eq!(out.code(), 0, "{}", out.stderr());
    assert_eq!(out.stdout(), "2c2\n< b\n---\n> B\nrc=1\n-b\n+B\n c\n");
}

#[tokio::test]
async fn tar_and_gzip_round_trip() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p pkg/lib; echo one > pkg/a; echo two > pkg/lib/b; tar -czf pkg.tgz pkg; rm -r pkg; \
             tar -tzf pkg.tgz | sort; tar -xzf pkg.tgz; cat pkg/lib/b; \
             echo zipped > z; gzip z; ls z*; gzip -d z.gz; cat z")
        .await;
    assert_eq!(
        out.ok(),
        "pkg/\npkg/a\npkg/lib/\npkg/lib/b\ntwo\nz.gz\nzipped\n"
    );
    // The archive is a real gzip stream in the engine.
    assert_eq!(&c.read("pkg.tgz")[..2], &[0x1f, 0x8b]);
}
