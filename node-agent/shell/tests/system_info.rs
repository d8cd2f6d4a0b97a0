//! What the shell says about the system it runs on: `df` over the
//! computer's filesystem with the engine's figures, `uname` with the node's
//! real kernel, and one name for the sandbox user.

mod common;

use agentcomputer_fs::Limits;
use common::Computer;

fn computer() -> Computer {
    Computer::with_limits(Limits {
        max_bytes: 100 << 20,
        max_inodes: 5000,
    })
}

#[tokio::test]
async fn df_prints_gnu_layout_with_the_engine_figures() {
    let c = computer();
    c.write("blob", &vec![7u8; 3 << 20]);
    let st = c.fs.statfs().unwrap();
    let used_k = st.used_bytes.div_ceil(1024);
    let avail_k = st.blocks_free * 4;
    let pct = (st.used_bytes * 100).div_ceil(st.used_bytes + st.blocks_free * 4096);
    let out = c.sh("df; df .").await.ok();
    let line = format!(
        "agentcomputer  {:>9} {used_k:>5} {avail_k:>9} {pct:>3}% /workspace\n",
        100 * 1024
    );
    let one = format!("Filesystem     1K-blocks  Used Available Use% Mounted on\n{line}");
    assert_eq!(out, format!("{one}{one}"), "{out}");

    // One line after the header, so `tail -1` is the filesystem's.
    let human = c.sh("df -h . | tail -1").await.ok();
    assert_eq!(
        human,
        format!("agentcomputer   100M  3.0M   97M   {pct}% /workspace\n")
    );
    assert_eq!(c.sh("df -h | wc -l").await.ok().trim(), "2");
    let header = c.sh("df -h | head -1").await.ok();
    assert_eq!(header, "Filesystem      Size  Used Avail Use% Mounted on\n");

    // Inodes: the computer's limit, not the scratch tree's.
    let inodes = c.sh("df -i /workspace").await.ok();
    let used = st.files - st.files_free;
    assert_eq!(st.files, 5000);
    assert_eq!(
        inodes,
        format!(
            "Filesystem     Inodes IUsed IFree IUse% Mounted on\n\
             agentcomputer    5000 {used:>5} {:>5} {:>4}% /workspace\n",
            st.files_free,
            (used * 100).div_ceil(st.files)
        )
    );
    let posix = c.sh("df -P | head -1").await.ok();
    assert_eq!(
        posix,
        "Filesystem     1024-blocks  Used Available Capacity Mounted on\n"
    );
}

#[tokio::test]
async fn df_refuses_what_is_not_the_computer() {
    let c = computer();
    let out = c
        .sh("df nope; echo $?; df /tmp; echo $?; df -x; echo $?")
        .await;
    assert_eq!(out.stdout(), "1\n1\n1\n");
    assert_eq!(
        out.stderr(),
        "df: nope: No such file or directory\n\
         df: /tmp: per-run scratch space, not the computer's file system; df shows /workspace\n\
         df: invalid option -- 'x'\nTry 'df --help' for more information.\n"
    );
}

#[tokio::test]
async fn uname_reports_the_nodes_kernel() {
    let c = computer();
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .unwrap()
            .trim()
            .to_string()
    };
    let (release, version) = (read("osrelease"), read("version"));
    let arch = std::env::consts::ARCH;
    let out = c
        .sh("uname; uname -r; uname -m; uname -n; hostname; uname -a")
        .await
        .ok();
    assert_eq!(
        out,
        format!(
            "Linux\n{release}\n{arch}\ncomputer\ncomputer\nLinux computer {release} {version} {arch} GNU/Linux\n"
        )
    );
    assert!(!out.contains("sandbox"), "{out}");
    let bad = c.sh("uname -z").await;
    assert_eq!(bad.code(), 1);
}

#[tokio::test]
async fn the_sandbox_user_has_one_name() {
    let c = computer();
    let user = agentcomputer_runtime_contract::SANDBOX_USER;
    let uid = agentcomputer_runtime_contract::SANDBOX_UID;
    let out = c
        .sh("whoami; echo $USER $LOGNAME $HOME; id -un; id -u")
        .await
        .ok();
    assert_eq!(
        out,
        format!("{user}\n{user} {user} /home/{user}\n{user}\n{uid}\n")
    );
}
