//! The API reference `docs/api.md` is generated from the `.proto` comments
//! and must match them: `committed_reference_is_current` fails when the
//! proto changed without regenerating it. The other tests check the
//! renderer on a fixture compiled by `protox`, as `build.rs` compiles the
//! real API.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use agentcomputer_proto::apidoc::{render, render_api, slug};

const REGENERATE: &str = "cargo run -p agentcomputer-proto --bin api-doc > docs/api.md \
     (or UPDATE_API_DOC=1 cargo test -p agentcomputer-proto --test api_doc)";

fn committed_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md")
}

#[test]
fn committed_reference_is_current() {
    let rendered = render_api().expect("render the API reference");
    let path = committed_path();
    if std::env::var_os("UPDATE_API_DOC").is_some_and(|v| v == "1") {
        std::fs::write(&path, &rendered).expect("write docs/api.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; generate it with: {REGENERATE}",
            path.display()
        )
    });
    if committed != rendered {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(rendered.lines().count()))
            + 1;
        panic!(
            "docs/api.md is out of date with proto/agentcomputer/v1/agentcomputer.proto \
             (first difference at line {line}:\n  committed: {:?}\n  generated: {:?});\n\
             regenerate it with: {REGENERATE}",
            committed.lines().nth(line - 1).unwrap_or(""),
            rendered.lines().nth(line - 1).unwrap_or(""),
        );
    }
}

/// Anchors of every heading and the targets of every `](#...)` link.
fn anchors_and_links(doc: &str) -> (HashSet<String>, Vec<String>) {
    let anchors = doc
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#').trim()))
        .collect();
    let links = doc
        .split("](#")
        .skip(1)
        .map(|rest| rest[..rest.find(')').expect("closed link")].to_string())
        .collect();
    (anchors, links)
}

#[test]
fn every_link_of_the_reference_reaches_a_heading() {
    let doc = render_api().unwrap();
    let (anchors, links) = anchors_and_links(&doc);
    assert!(
        links.len() > 100,
        "the reference links its types ({} links)",
        links.len()
    );
    for link in &links {
        assert!(anchors.contains(link), "#{link} names no heading");
    }
    // Every RPC and every message of the API has its section.
    for needle in [
        "#### AgentComputer.Exec\n\n[`ExecRequest`](#execrequest) → stream [`ExecEvent`](#execevent)",
        "#### AgentComputer.Write\n\nstream [`WriteRequest`](#writerequest) → [`WriteResponse`](#writeresponse)",
        "#### SandboxRunner.Attach\n\nstream [`RunnerEvent`](#runnerevent) → stream [`RunnerCommand`](#runnercommand)",
        "| `env` | `map<string, string>` | 5 |  |",
        "| `header` | [`WriteHeader`](#writeheader) | 1 | oneof `msg` |",
        "| `cidrs` | [`EgressCidr`](#egresscidr) | 2 | repeated |",
        "| `RUNTIME_JAVASCRIPT` | 2 |",
    ] {
        assert!(doc.contains(needle), "missing {needle:?}");
    }
}

const FIXTURE: &str = r#"// File intro.
syntax = "proto3";

package demo.v2;

// The demo service.
service Demo {
  // Unary call.
  rpc Get(GetRequest) returns (Thing);
  // Server stream.
  rpc Watch(GetRequest) returns (stream Thing);
  // Client stream.
  rpc Upload(stream Thing) returns (GetRequest);
  rpc Chat(stream Thing) returns (stream Thing) {
    option deprecated = true;
  }
}

message GetRequest {
  // Which thing; a | in a comment
  // spans two lines.
  //
  // Second paragraph.
  string id = 1;
  optional uint32 limit = 2; // Trailing comment.
}

// A thing.
message Thing {
  // Nested kind.
  enum Kind {
    // Nothing set.
    KIND_UNSPECIFIED = 0;
    KIND_BIG = 1;
  }
  // A nested message.
  message Part {
    sint64 size = 1;
  }
  Kind kind = 1;
  repeated Part parts = 2;
  map<string, Part> by_name = 3;
  oneof payload {
    bytes data = 4;
    Color color = 5;
  }
  int32 old = 6 [deprecated = true];
}

// Top-level enum.
enum Color {
  COLOR_UNSPECIFIED = 0;
  // Red.
  COLOR_RED = 7;
}
"#;

fn render_fixture(source: &str) -> Result<String, agentcomputer_proto::apidoc::ApiDocError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("demo.proto"), source).unwrap();
    let set = protox::compile(["demo.proto"], [dir.path()]).expect("fixture compiles");
    render(&set)
}

#[test]
fn renders_services_messages_and_enums_with_their_comments() {
    let doc = render_fixture(FIXTURE).unwrap();
    let expected_in_order = [
        "# demo.v2 API reference\n",
        "Source: `demo.proto`, package `demo.v2`.\n\nFile intro.\n",
        "## Services\n\n### Demo\n\nThe demo service.\n",
        "#### Demo.Get\n\n[`GetRequest`](#getrequest) → [`Thing`](#thing)\n\nUnary call.\n",
        "#### Demo.Watch\n\n[`GetRequest`](#getrequest) → stream [`Thing`](#thing)\n\nServer stream.\n",
        "#### Demo.Upload\n\nstream [`Thing`](#thing) → [`GetRequest`](#getrequest)\n\nClient stream.\n",
        "#### Demo.Chat\n\nstream [`Thing`](#thing) → stream [`Thing`](#thing)\n\nDeprecated.\n",
        "## Messages\n\n### GetRequest\n\n| Field |",
        "| `id` | `string` | 1 |  | Which thing; a \\| in a comment spans two lines.<br><br>Second paragraph. |\n",
        "| `limit` | `uint32` | 2 | optional | Trailing comment. |\n",
        "### Thing\n\nA thing.\n",
        "| `kind` | [`Thing.Kind`](#thingkind) | 1 |  |  |\n",
        "| `parts` | [`Thing.Part`](#thingpart) | 2 | repeated |  |\n",
        "| `by_name` | map&lt;`string`, [`Thing.Part`](#thingpart)&gt; | 3 |  |  |\n",
        "| `data` | `bytes` | 4 | oneof `payload` |  |\n",
        "| `color` | [`Color`](#color) | 5 | oneof `payload` |  |\n",
        "| `old` | `int32` | 6 |  | Deprecated. |\n",
        "### Thing.Part\n\nA nested message.\n\n| Field | Type | Number | Label | Description |\n|-------|------|--------|-------|-------------|\n| `size` | `sint64` | 1 |  |  |\n",
        "## Enums\n\n### Color\n\nTop-level enum.\n",
        "| `COLOR_RED` | 7 | Red. |\n",
        "### Thing.Kind\n\nNested kind.\n",
        "| `KIND_UNSPECIFIED` | 0 | Nothing set. |\n| `KIND_BIG` | 1 |  |\n",
    ];
    let mut from = 0;
    for piece in expected_in_order {
        match doc[from..].find(piece) {
            Some(at) => from += at + piece.len(),
            None => panic!("missing, or out of order: {piece:?}\n--- rendered:\n{doc}"),
        }
    }
    // The map's entry message is not a section of its own.
    assert!(!doc.contains("ByNameEntry"), "{doc}");
    let (anchors, links) = anchors_and_links(&doc);
    for link in links {
        assert!(anchors.contains(&link), "#{link} names no heading:\n{doc}");
    }
    assert!(doc.ends_with("|\n") && !doc.ends_with("\n\n"));
}

#[test]
fn refuses_two_headings_with_one_anchor() {
    // The RPC heading `A.B` and the message `AB` share the anchor #ab.
    let source = r#"syntax = "proto3";
package clash;
service A { rpc B(AB) returns (AB); }
message AB {}
"#;
    let err = render_fixture(source).unwrap_err().to_string();
    assert!(err.contains("#ab"), "{err}");
}
