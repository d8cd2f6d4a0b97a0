//! One rule for an exec's memory budget in every runtime: the request's
//! `memory_limit_bytes`, else the computer's limit, else 256 MiB; a
//! request above the limit is refused naming it, never lowered in silence
//! (docs/isolation.md, "The budget of one exec").

mod common;

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

const MIB: u64 = 1 << 20;

#[tokio::test]
async fn a_budget_above_the_computers_limit_is_refused_in_every_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "m", 0).await;
    let mut runtimes = vec![
        (pb::Runtime::Shell, "true", ""),
        (pb::Runtime::Javascript, "export default () => 1", "null"),
    ];
    if sandbox_possible() {
        runtimes.push((pb::Runtime::Container, "true", ""));
    }
    for (runtime, script, input) in runtimes {
        let req = |memory: u64| pb::ExecRequest {
            computer: "m".into(),
            script: script.into(),
            input_json: input.into(),
            runtime: runtime as i32,
            memory_limit_bytes: memory,
            ..Default::default()
        };
        let err = c.exec(req(512 * MIB)).await.unwrap_err();
        assert_errno(&err, Code::InvalidArgument, "EINVAL");
        assert!(
            err.message().contains("memory_limit_bytes 536870912")
                && err.message().contains("268435456 bytes (256 MiB)"),
            "{runtime:?}: {err:?}"
        );
        let err = c.exec(req(4096)).await.unwrap_err();
        assert_errno(&err, Code::InvalidArgument, "EINVAL");
        assert!(
            err.message().contains("below the least") && err.message().contains("8 MiB"),
            "{runtime:?}: {err:?}"
        );
        // At the limit, and below it, the run goes ahead.
        for ok in [256 * MIB, 64 * MIB] {
            let r = run(&mut c, req(ok)).await;
            assert_eq!(
                (r.code, r.error.as_str()),
                (0, ""),
                "{runtime:?} {ok}: {r:?}"
            );
        }
    }
}
