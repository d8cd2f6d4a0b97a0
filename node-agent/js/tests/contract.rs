//! The module contract: default export, result JSON, top-level await,
//! console streams, exit codes and uncaught errors.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn default_export_gets_input_and_returns_json() {
    let c = computer();
    let mut req = request("export default async (input) => ({ doubled: input.n * 2, name: input.name })");
    req.input = json!({"n": 21, "name": "x"});
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.ok(), &json!({"doubled": 42, "name": "x"}));
}

#[tokio::test]
async fn smoke() {
    let c = computer();
    let r = run(&c.fs, "console.log('hi', {a: 1}, [1,2]); export default () => 1").await;
    println!("{r:?}");
    assert_eq!(r.ok(), &json!(1));
    assert_eq!(r.stdout, "hi { a: 1 } [ 1, 2 ]\n");
}
