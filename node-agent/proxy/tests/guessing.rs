//! Credential guessing against a credential listener: wrong guesses from
//! one source are answered `407` only up to a small burst, then `429`
//! without the credential being looked at, and each refusal is logged at
//! the default level with the log itself rate-limited.

use std::io::Write;
use std::sync::{Arc, Mutex};

use agentcomputer_egress::Policy;
use agentcomputer_proxy::{Caller, Credentials, Metrics, Proxy};
use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Log lines written by the proxy, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn ask(port: u16, token: &str) -> String {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("computer:{token}"));
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request =
        format!("CONNECT 127.0.0.1:9 HTTP/1.1\r\nproxy-authorization: Basic {basic}\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn guesses_are_rate_limited_per_source_and_logged_within_bounds() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();

    let creds = Credentials::new();
    let _guard = creds.issue(
        "f".repeat(64),
        Caller {
            computer: "demo".into(),
            key: "demo".into(),
            policy: Arc::new(Policy::default()),
        },
    );
    let metrics = Metrics::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    tokio::spawn(
        Proxy::new(Arc::new(creds.clone()), metrics.clone()).serve(listener, stop.clone()),
    );

    const GUESSES: usize = 300;
    let (mut refused, mut throttled) = (0, 0);
    for i in 0..GUESSES {
        let got = ask(port, &format!("{i:064x}")).await;
        if got.starts_with("HTTP/1.1 407") {
            refused += 1;
        } else if got.starts_with("HTTP/1.1 429") {
            assert!(got.to_ascii_lowercase().contains("retry-after:"), "{got}");
            throttled += 1;
        } else {
            panic!("unexpected answer to guess {i}: {got}");
        }
    }
    assert!(
        refused <= 20,
        "{refused} of {GUESSES} guesses were checked (407), {throttled} throttled (429)"
    );
    assert_eq!(refused + throttled, GUESSES);
    assert_eq!(metrics.get("denied", "unauthenticated") as usize, refused);
    assert_eq!(metrics.get("denied", "throttled") as usize, throttled);

    // Even the right credential is not looked at while its source is
    // throttled: that is what keeps the guessing rate bounded.
    let got = ask(port, &"f".repeat(64)).await;
    assert!(got.starts_with("HTTP/1.1 429"), "{got}");

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("egress proxy: credential"))
        .collect();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.contains("WARN")),
        "refusals must be logged at WARN:\n{log}"
    );
    assert!(
        lines.len() <= 15,
        "{} log lines for {GUESSES} guesses: the log is not rate-limited",
        lines.len()
    );
    stop.cancel();
}
