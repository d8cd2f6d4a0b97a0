//! `curl` and `wget` against real HTTP servers on 127.0.0.1 and 127.0.0.2,
//! under the computer's egress policy.

mod common;
mod http_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_egress::{CidrConfig, EgressConfig, Mode, Policy};
use agentcomputer_shell::{EXIT_CANCELLED, EXIT_TIMEOUT, ExecRequest, ShellLimits};
use common::{Computer, Run, exec, exec_with_limits};
use http_server::{Server, binary_body};
use tokio_util::sync::CancellationToken;

/// Allows 127.0.0.1 only (any port).
fn first_loopback() -> Arc<Policy> {
    Arc::new(
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig::parse_flag("127.0.0.1").unwrap()],
            ..EgressConfig::default()
        })
        .unwrap(),
    )
}

fn request(script: &str, egress: Arc<Policy>) -> ExecRequest {
    ExecRequest {
        script: script.into(),
        timeout: Duration::from_secs(30),
        egress,
        ..ExecRequest::default()
    }
}

async fn sh(c: &Computer, script: &str) -> Run {
    c.exec(request(script, first_loopback())).await
}

#[tokio::test]
async fn get_and_post_with_headers_and_body() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    assert_eq!(
        sh(&c, &format!("curl -s {}", s.url("/hello"))).await.ok(),
        "hello\n"
    );

    let run = sh(
        &c,
        &format!(
            "curl -sS -X POST -H 'X-Token: abc' -H 'Content-Type: application/json' -d '{{\"a\":1}}' {}",
            s.url("/echo")
        ),
    )
    .await;
    let out = run.ok();
    assert!(out.starts_with("POST /echo\n"), "{out}");
    assert!(out.contains("x-token: abc\n"), "{out}");
    assert!(out.contains("content-type: application/json\n"), "{out}");
    assert!(out.ends_with("\n\n{\"a\":1}"), "{out}");

    // -d @file strips newlines, --data-binary keeps them; both from the computer.
    c.write("form.txt", b"a=1\nb=2\n");
    let out = sh(
        &c,
        &format!(
            "curl -s -d @form.txt {0}; curl -s --data-binary @form.txt {0}",
            s.url("/echo")
        ),
    )
    .await
    .ok();
    assert!(
        out.contains("content-type: application/x-www-form-urlencoded\n"),
        "{out}"
    );
    assert!(out.contains("\n\na=1b=2POST"), "{out}");
    assert!(out.ends_with("\n\na=1\nb=2\n"), "{out}");

    // -u, -G, -A, and a body from stdin.
    let out = sh(
        &c,
        &format!(
            "echo -n piped | curl -s -u user:pw -A agent/1 --data-binary @- {}",
            s.url("/echo")
        ),
    )
    .await
    .ok();
    assert!(out.contains("authorization: Basic dXNlcjpwdw==\n"), "{out}");
    assert!(out.contains("user-agent: agent/1\n"), "{out}");
    assert!(out.ends_with("\n\npiped"), "{out}");
    let out = sh(&c, &format!("curl -s -G -d q=1 -d r=2 {}", s.url("/echo")))
        .await
        .ok();
    assert!(out.starts_with("GET /echo?q=1&r=2\n"), "{out}");
}

#[tokio::test]
async fn output_files_and_binary_stdout_are_byte_clean() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let run = sh(&c, &format!("curl -sS -o out.bin {0} && curl -s -O {0} && mkdir -p d && cd d && curl -sLo ../o2 {0}", s.url("/binary"))).await;
    run.ok();
    assert_eq!(c.read("out.bin"), binary_body());
    assert_eq!(c.read("binary"), binary_body());
    assert_eq!(c.read("o2"), binary_body());

    let run = sh(&c, &format!("curl -s {}", s.url("/binary"))).await;
    assert_eq!(run.code(), 0);
    assert_eq!(run.stdout_bytes(), binary_body());
    let piped = sh(&c, &format!("curl -s {} | wc -c", s.url("/binary")))
        .await
        .ok();
    assert_eq!(piped.trim(), "3000");
    // Into the scratch tree too.
    let tmp = sh(
        &c,
        &format!("curl -s -o /tmp/x {} && wc -c < /tmp/x", s.url("/binary")),
    )
    .await
    .ok();
    assert_eq!(tmp.trim(), "3000");
}

#[tokio::test]
async fn fail_flags_and_write_out() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let url = s.url("/missing");

    let run = sh(&c, &format!("curl -sSf -o page {url}")).await;
    assert_eq!(run.code(), 22);
    assert_eq!(run.stdout(), "");
    assert_eq!(
        run.stderr(),
        "curl: (22) The requested URL returned error: 404\n"
    );
    let exists = sh(&c, "test -e page && echo yes || echo no").await.ok();
    assert_eq!(exists, "no\n");

    let quiet = sh(&c, &format!("curl -sf {url}")).await;
    assert_eq!((quiet.code(), quiet.stderr().as_str()), (22, ""));

    let body = sh(&c, &format!("curl -s --fail-with-body {url}")).await;
    assert_eq!(
        (body.code(), body.stdout().as_str()),
        (22, "no such page\n")
    );

    // Without -f a 404 is a successful transfer.
    let plain = sh(
        &c,
        &format!("curl -s -o /dev/null -w '%{{http_code}}\\n' {url}"),
    )
    .await;
    assert_eq!(plain.ok(), "404\n");
    let code = sh(
        &c,
        &format!(
            "curl -s -w '%{{http_code}} %{{size_download}}' {}",
            s.url("/hello")
        ),
    )
    .await;
    assert_eq!(code.ok(), "hello\n200 6");
}

#[tokio::test]
async fn headers_with_include_and_head() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let out = sh(&c, &format!("curl -si {}", s.url("/hello"))).await.ok();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.contains("content-type: text/plain\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nhello\n"), "{out}");
    let head = sh(&c, &format!("curl -sI {}", s.url("/hello"))).await.ok();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head}");
    assert_eq!(s.requests().last().unwrap().method, "HEAD");

    // Names and the reason phrase as the server sent them, so scripts can
    // grep for them as they would with curl.
    let cased = sh(&c, &format!("curl -sI {}", s.url("/cased"))).await.ok();
    assert_eq!(
        cased,
        "HTTP/1.1 200 Fine\r\nContent-Length: 6\r\nX-Request-ID: r1\r\nETag: \"v1\"\r\nx-lower: yes\r\nConnection: close\r\n\r\n"
    );
    let grep = sh(
        &c,
        &format!(
            "curl -sI {} | grep '^Content-Length' | tr -d '\\r'",
            s.url("/cased")
        ),
    )
    .await
    .ok();
    assert_eq!(grep, "Content-Length: 6\n");
    let verbose = sh(&c, &format!("curl -sv -o /dev/null {}", s.url("/cased"))).await;
    verbose.ok();
    let err = verbose.stderr();
    assert!(
        err.starts_with(&format!(
            "> GET /cased HTTP/1.1\r\n> Host: {}\r\n> User-Agent: curl/8.5.0\r\n> Accept: */*\r\n>\r\n",
            s.addr
        )),
        "{err}"
    );
    assert!(
        err.contains("< HTTP/1.1 200 Fine\r\n< Content-Length: 6\r\n< X-Request-ID: r1\r\n"),
        "{err}"
    );
    let w = sh(&c, &format!("wget -S -O /dev/null {}", s.url("/cased"))).await;
    w.ok();
    assert!(
        w.stderr().contains("  X-Request-ID: r1\n"),
        "{}",
        w.stderr()
    );
}

#[tokio::test]
async fn a_denied_destination_is_never_contacted() {
    let c = Computer::new();
    let other = Server::start("127.0.0.2").await;
    let run = sh(&c, &format!("curl -sS -o got {}", other.url("/hello"))).await;
    assert_eq!(run.code(), 7);
    assert_eq!(
        run.stderr(),
        format!(
            "curl: (7) egress denied by policy: {} is not in the allow-list\n",
            other.addr
        )
    );
    assert_eq!(other.connection_count(), 0);
    assert_eq!(sh(&c, "ls").await.ok(), "");

    // A loopback rule for one port: another port is simply not listed.
    let one_port = Arc::new(
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![
                CidrConfig::parse_flag(&format!("127.0.0.2:{}", other.addr.port())).unwrap(),
            ],
            ..EgressConfig::default()
        })
        .unwrap(),
    );
    let other_port = other.addr.port().wrapping_add(1).max(1);
    let run = c
        .exec(request(
            &format!("curl -sS http://127.0.0.2:{other_port}/"),
            one_port.clone(),
        ))
        .await;
    assert_eq!(run.code(), 7);
    assert_eq!(
        run.stderr(),
        format!(
            "curl: (7) egress denied by policy: 127.0.0.2:{other_port} is not in the allow-list\n"
        )
    );
    let allowed = c
        .exec(request(
            &format!("curl -sS {}", other.url("/hello")),
            one_port,
        ))
        .await;
    assert_eq!(allowed.ok(), "hello\n");
    // No loopback rule at all: the message says what would allow it.
    let wide = Arc::new(
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig::parse_flag("10.0.0.0/8").unwrap()],
            ..EgressConfig::default()
        })
        .unwrap(),
    );
    let run = c
        .exec(request(&format!("curl -sS {}", other.url("/hello")), wide))
        .await;
    assert_eq!(
        run.stderr(),
        format!(
            "curl: (7) egress denied by policy: {} is a loopback address; only a cidr rule inside 127.0.0.0/8 or ::1/128 allows it\n",
            other.addr
        )
    );
    assert_eq!(other.connection_count(), 1);

    let run = sh(&c, "curl -sS http://10.0.0.5/").await;
    assert_eq!(run.code(), 7);
    assert_eq!(
        run.stderr(),
        "curl: (7) egress denied by policy: 10.0.0.5:80 is not in the allow-list\n"
    );
    let meta = sh(&c, "curl -sS http://169.254.169.254/latest/meta-data/").await;
    assert_eq!(meta.code(), 7);
    assert!(
        meta.stderr().contains("cloud metadata"),
        "{}",
        meta.stderr()
    );
}

#[tokio::test]
async fn deny_all_is_the_default() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let run = c.sh(&format!("curl -sS {}", s.url("/hello"))).await;
    assert_eq!(run.code(), 7);
    assert!(
        run.stderr().contains("the egress mode is deny-all"),
        "{}",
        run.stderr()
    );
    let w = c.sh(&format!("wget -O - {}", s.url("/hello"))).await;
    assert_eq!(w.code(), 4);
    assert!(
        w.stderr().contains("egress denied by policy"),
        "{}",
        w.stderr()
    );
    assert_eq!(s.connection_count(), 0);
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let other = Server::start("127.0.0.2").await;

    let inside = s.url(&format!("/redirect?to={}", s.url("/hello")));
    let out = sh(
        &c,
        &format!("curl -sL -w ' %{{num_redirects}} %{{url_effective}}' '{inside}'"),
    )
    .await;
    assert_eq!(out.ok(), format!("hello\n 1 {}", s.url("/hello")));

    let outside = s.url(&format!("/redirect?to={}", other.url("/hello")));
    let run = sh(&c, &format!("curl -sSL -o got '{outside}'")).await;
    assert_eq!(run.code(), 7, "{}", run.stderr());
    assert!(
        run.stderr().contains("egress denied by policy: 127.0.0.2:"),
        "{}",
        run.stderr()
    );
    assert_eq!(other.connection_count(), 0);

    // Without -L the redirect itself is the answer.
    let run = sh(
        &c,
        &format!("curl -s -w ' %{{http_code}} %{{redirect_url}}' '{outside}'"),
    )
    .await;
    assert_eq!(run.ok(), format!("moved\n 302 {}", other.url("/hello")));

    // wget follows by default, and checks every hop too.
    let w = sh(&c, &format!("wget -q -O - '{outside}'")).await;
    assert_eq!(w.code(), 4);
    assert_eq!(w.stdout(), "");
    assert_eq!(
        sh(&c, &format!("wget -qO- '{inside}'")).await.ok(),
        "hello\n"
    );

    // A 303 after a POST becomes a GET without the body.
    let out = sh(&c, &format!("curl -sL -d x=1 {}", s.url("/post-redirect")))
        .await
        .ok();
    assert!(out.starts_with("GET /echo\n"), "{out}");

    let looping = sh(&c, &format!("curl -sSL --max-redirs 3 {}", s.url("/loop"))).await;
    assert_eq!(looping.code(), 47);
    assert_eq!(
        looping.stderr(),
        "curl: (47) Maximum (3) redirects followed\n"
    );
}

#[tokio::test]
async fn responses_are_capped() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let limits = ShellLimits {
        max_download_bytes: 1000,
        ..ShellLimits::default()
    };
    let run = |script: String| {
        let fs = c.fs.clone();
        let limits = limits.clone();
        async move {
            exec_with_limits(
                &fs,
                request(&script, first_loopback()),
                CancellationToken::new(),
                limits,
            )
            .await
        }
    };
    let sized = run(format!("curl -sS {}", s.url("/big?n=2000"))).await;
    assert_eq!(sized.code(), 63);
    assert_eq!(sized.stdout(), "");
    assert!(
        sized.stderr().contains("larger than 1000 bytes"),
        "{}",
        sized.stderr()
    );
    // No length announced: stopped once past the cap, and the part already
    // written is removed rather than left looking like a whole download.
    let no_length = run(format!("curl -sS -o u {}", s.url("/unsized"))).await;
    assert_eq!(no_length.code(), 63, "{}", no_length.stderr());
    let cleaned = |name: &str| format!("test -e {name} && echo kept || echo removed");
    assert_eq!(sh(&c, &cleaned("u")).await.ok(), "removed\n");
    let lowered = sh(
        &c,
        &format!("curl -s --max-filesize 1000 -o m {}", s.url("/unsized")),
    )
    .await;
    assert_eq!(lowered.code(), 63);
    assert_eq!(sh(&c, &cleaned("m")).await.ok(), "removed\n");
    let named = sh(
        &c,
        &format!("curl -s --max-filesize 1000 -O {}", s.url("/unsized")),
    )
    .await;
    assert_eq!(named.code(), 63);
    assert_eq!(sh(&c, &cleaned("unsized")).await.ok(), "removed\n");
    // A body that broke off mid-transfer goes too (wget: -O and named).
    let broken = sh(&c, &format!("wget -q -O p -T 1 {}", s.url("/partial"))).await;
    assert_ne!(broken.code(), 0);
    assert_eq!(sh(&c, &cleaned("p")).await.ok(), "removed\n");
    let w = run(format!("wget -q {}", s.url("/unsized"))).await;
    assert_eq!(w.code(), 1);
    assert_eq!(sh(&c, &cleaned("unsized")).await.ok(), "removed\n");
    // --fail-with-body keeps the error page it was asked to save.
    let kept = sh(
        &c,
        &format!("curl -s --fail-with-body -o e {}", s.url("/missing")),
    )
    .await;
    assert_eq!(kept.code(), 22);
    assert_eq!(c.read("e"), b"no such page\n");
    assert_eq!(
        run(format!("curl -s {} | wc -c", s.url("/big?n=1000")))
            .await
            .ok()
            .trim(),
        "1000"
    );
    let lowered = sh(
        &c,
        &format!("curl -s --max-filesize 100 {}", s.url("/big?n=2000")),
    )
    .await;
    assert_eq!(lowered.code(), 63);
    let w = run(format!("wget -q -O x {}", s.url("/big?n=2000"))).await;
    assert_eq!(w.code(), 1);
}

#[tokio::test]
async fn max_time_stops_a_server_that_never_answers() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let start = Instant::now();
    let run = sh(&c, &format!("curl -sS --max-time 0.5 {}", s.url("/hang"))).await;
    assert_eq!(run.code(), 28);
    assert!(
        run.stderr()
            .starts_with("curl: (28) Operation timed out after "),
        "{}",
        run.stderr()
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let w = sh(&c, &format!("wget -T 0.5 -O - {}", s.url("/hang"))).await;
    assert_eq!(w.code(), 4);
    wait_until(|| *s.hangs_closed.lock().unwrap() == 2).await;
}

#[tokio::test]
async fn the_exec_timeout_and_cancel_stop_a_hanging_download() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let start = Instant::now();
    let run = c
        .exec(ExecRequest {
            timeout: Duration::from_secs(1),
            ..request(
                &format!(
                    "curl -s {}; echo after > marker; echo after",
                    s.url("/hang")
                ),
                first_loopback(),
            )
        })
        .await;
    assert_eq!(run.code(), EXIT_TIMEOUT);
    // The script ends with the stopped download.
    assert!(!run.stdout().contains("after"), "{run:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // The connection is closed, not left hanging.
    wait_until(|| *s.hangs_closed.lock().unwrap() == 1).await;

    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let run = exec(
        &c.fs,
        request(
            &format!(
                "wget -q -O - {}; echo after > marker; echo after",
                s.url("/hang")
            ),
            first_loopback(),
        ),
        cancel,
    )
    .await;
    assert_eq!(run.code(), EXIT_CANCELLED);
    assert!(!run.stdout().contains("after"), "{run:?}");
    assert!(
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"marker", false)
            .is_err(),
        "the statement after the stopped downloads ran"
    );
    wait_until(|| *s.hangs_closed.lock().unwrap() == 2).await;
}

#[tokio::test]
async fn bodies_stream_to_stdout_as_they_arrive() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let run = c
        .exec(ExecRequest {
            timeout: Duration::from_secs(1),
            ..request(&format!("curl -s {}", s.url("/partial")), first_loopback())
        })
        .await;
    assert_eq!(run.code(), EXIT_TIMEOUT);
    // Delivered before the transfer ended, not held until it finished.
    assert_eq!(run.stdout(), "0123456789");
    wait_until(|| *s.hangs_closed.lock().unwrap() == 1).await;
}

#[tokio::test]
async fn wget_saves_files_like_wget() {
    let c = Computer::new();
    let s = Server::start("127.0.0.1").await;
    let url = s.url("/hello");
    sh(
        &c,
        &format!("wget -q {url} && wget -q {url} && wget -q -P sub {url}"),
    )
    .await
    .ok();
    assert_eq!(c.read("hello"), b"hello\n");
    assert_eq!(c.read("hello.1"), b"hello\n");
    assert_eq!(c.read("sub/hello"), b"hello\n");
    let brief = sh(&c, &format!("wget -nv -O nv {url}")).await;
    brief.ok();
    let line = brief.stderr();
    // `2025-01-02 03:04:05 URL:http://... [6/6] -> "nv" [1]`
    assert_eq!(
        line.len(),
        20 + format!("URL:{url} [6/6] -> \"nv\" [1]\n").len(),
        "{line}"
    );
    assert!(
        line.ends_with(&format!(" URL:{url} [6/6] -> \"nv\" [1]\n")),
        "{line}"
    );
    assert_eq!(c.read("nv"), b"hello\n");
    let chatty = sh(&c, &format!("wget -O named {url}")).await;
    chatty.ok();
    assert!(chatty.stderr().contains("200 OK"), "{}", chatty.stderr());
    assert!(
        chatty.stderr().contains("'named' saved [6]"),
        "{}",
        chatty.stderr()
    );
    let missing = sh(&c, &format!("wget -O gone {}", s.url("/missing"))).await;
    assert_eq!(missing.code(), 8);
    assert!(
        missing.stderr().contains("ERROR 404: Not Found."),
        "{}",
        missing.stderr()
    );
    assert_eq!(
        sh(&c, "test -e gone && echo yes || echo no").await.ok(),
        "no\n"
    );
    let post = sh(
        &c,
        &format!(
            "wget -qO- --post-data 'k=v' --header 'X-A: 1' {}",
            s.url("/echo")
        ),
    )
    .await
    .ok();
    assert!(post.starts_with("POST /echo\n"), "{post}");
    assert!(post.contains("x-a: 1\n"), "{post}");
    assert!(post.ends_with("\n\nk=v"), "{post}");
}

#[tokio::test]
async fn bad_command_lines() {
    let c = Computer::new();
    let run = sh(&c, "curl --frobnicate http://127.0.0.1/").await;
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr()
            .starts_with("curl: option --frobnicate: is unknown\n"),
        "{}",
        run.stderr()
    );
    assert_eq!(sh(&c, "curl -s").await.code(), 2);
    assert_eq!(sh(&c, "curl -s ftp://127.0.0.1/x").await.code(), 1);
    assert_eq!(sh(&c, "wget").await.code(), 1);
}

async fn wait_until(done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "condition not reached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
