//! Progress bars for commands that move many bytes (`put`, `get`,
//! `backup`).
//!
//! A bar is drawn on stderr only when stderr is a terminal that can redraw
//! a line (not `TERM=dumb`), `--no-progress` was not given, and the data
//! itself is not being written to that terminal (`get NAME PATH -` with
//! stdout on the terminal); in a pipe, a file or a test the commands print
//! exactly what they print without bars. With
//! a known total the bar shows bytes done of the total, the rate and the
//! ETA; with an unknown total, a spinner with bytes and rate. Drawing is
//! done by `indicatif`, at most 20 times a second.

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What decides whether a progress bar is drawn.
#[derive(Clone, Copy, Debug)]
pub struct Conditions<'a> {
    /// stderr, where the bar goes, is a terminal.
    pub stderr_is_terminal: bool,
    /// The `TERM` environment variable.
    pub term: Option<&'a OsStr>,
    /// The user asked for no bar (`--no-progress`).
    pub disabled: bool,
    /// The transferred data goes to stdout, and stdout is a terminal.
    pub data_on_terminal: bool,
}

/// Whether a progress bar should be drawn: stderr is a terminal, the
/// terminal is not `dumb` (`TERM=dumb` cannot move the cursor, so every
/// redraw would become a new line), the user did not turn bars off, and
/// the bar would not be drawn into the data being written to the terminal.
pub fn should_draw(c: Conditions<'_>) -> bool {
    c.stderr_is_terminal && !c.disabled && !c.data_on_terminal && c.term != Some(OsStr::new("dumb"))
}

/// [`should_draw`] for this process's stderr, stdout and `TERM`;
/// `data_to_stdout` says whether the transferred data goes to stdout.
pub fn enabled(disabled: bool, data_to_stdout: bool) -> bool {
    let term = std::env::var_os("TERM");
    should_draw(Conditions {
        stderr_is_terminal: std::io::stderr().is_terminal(),
        term: term.as_deref(),
        disabled,
        data_on_terminal: data_to_stdout && std::io::stdout().is_terminal(),
    })
}

/// One transfer's progress: a bar on stderr, or nothing at all when
/// drawing is off. Dropped before [`Transfer::finish`] (the transfer
/// failed), the bar is erased so that the error line stands alone.
pub struct Transfer {
    bar: Option<ProgressBar>,
}

/// Adds transferred bytes to a [`Transfer`]; cheap to clone and `Send`, for
/// the thread that moves the data.
#[derive(Clone)]
pub struct Counter(Option<ProgressBar>);

impl Counter {
    /// Counts `bytes` more bytes as transferred.
    pub fn add(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(bytes);
        }
    }
}

impl Transfer {
    /// Starts the progress of moving `total` bytes (`None`: unknown), with
    /// `label` (such as `put big.bin`) in front, cut to fit the terminal's
    /// width so that the line never wraps. Draws nothing unless `draw` (from
    /// [`enabled`]).
    pub fn start(label: String, total: Option<u64>, draw: bool) -> Transfer {
        if !draw {
            return Transfer { bar: None };
        }
        Transfer::drawn_to(label, total, ProgressDrawTarget::stderr())
    }

    fn drawn_to(label: String, total: Option<u64>, target: ProgressDrawTarget) -> Transfer {
        let bar = ProgressBar::with_draw_target(total, target);
        bar.set_style(style(total.is_some()));
        bar.set_message(label);
        // Redraw while the data stalls, so the rate and ETA stay current.
        bar.enable_steady_tick(Duration::from_millis(200));
        Transfer { bar: Some(bar) }
    }

    /// The total became known once the data started (a stream that reports
    /// it, like Backup's): a spinner turns into a bar; a bar takes the new
    /// total.
    pub fn set_total(&self, total: u64) {
        if let Some(bar) = &self.bar {
            match bar.length() {
                Some(len) if len == total => {}
                Some(_) => bar.set_length(total),
                None => {
                    bar.set_length(total);
                    bar.set_style(style(true));
                }
            }
        }
    }

    /// A handle that counts bytes into this transfer.
    pub fn counter(&self) -> Counter {
        Counter(self.bar.clone())
    }

    /// The transfer completed: the bar is left on screen in its final
    /// state (bytes, mean rate).
    pub fn finish(mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }
}

/// A bar when the total is known, else a spinner.
fn style(known_total: bool) -> ProgressStyle {
    let template = if known_total {
        "{wide_msg} [{bar:20}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}"
    } else {
        "{spinner} {wide_msg} {binary_bytes} {binary_bytes_per_sec} {elapsed}"
    };
    ProgressStyle::with_template(template)
        .expect("the templates are valid")
        .progress_chars("=> ")
}

impl Drop for Transfer {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_only_on_a_capable_terminal_unless_disabled() {
        let terminal = Conditions {
            stderr_is_terminal: true,
            term: Some(OsStr::new("xterm-256color")),
            disabled: false,
            data_on_terminal: false,
        };
        assert!(should_draw(terminal));
        assert!(
            should_draw(Conditions {
                term: None,
                ..terminal
            }),
            "TERM unset is not dumb"
        );
        assert!(
            !should_draw(Conditions {
                stderr_is_terminal: false,
                ..terminal
            }),
            "a pipe or file gets no bar"
        );
        assert!(!should_draw(Conditions {
            term: Some(OsStr::new("dumb")),
            ..terminal
        }));
        assert!(
            !should_draw(Conditions {
                disabled: true,
                ..terminal
            }),
            "--no-progress"
        );
        assert!(
            !should_draw(Conditions {
                data_on_terminal: true,
                ..terminal
            }),
            "get - onto the terminal"
        );
    }

    #[test]
    fn a_transfer_that_is_not_drawn_counts_nothing_and_draws_nothing() {
        let t = Transfer::start("put x".into(), Some(10), false);
        assert!(t.bar.is_none());
        t.counter().add(5);
        t.finish();
    }

    #[test]
    fn counters_share_the_bar_across_threads() {
        // Drawn into a hidden target: the bar's state is what is checked.
        let t = Transfer::drawn_to("get x".into(), Some(100), ProgressDrawTarget::hidden());
        let bar = t.bar.clone().unwrap();
        let c = t.counter();
        std::thread::spawn(move || c.add(60)).join().unwrap();
        t.counter().add(40);
        assert_eq!((bar.position(), bar.length()), (100, Some(100)));
        t.finish();
        assert!(bar.is_finished());
    }

    #[test]
    fn an_unknown_total_gets_a_spinner_without_length() {
        let t = Transfer::drawn_to("put /dev/stdin".into(), None, ProgressDrawTarget::hidden());
        let bar = t.bar.clone().unwrap();
        t.counter().add(7);
        assert_eq!((bar.position(), bar.length()), (7, None));
        t.set_total(20);
        t.counter().add(13);
        assert_eq!((bar.position(), bar.length()), (20, Some(20)));
        drop(t);
        assert!(bar.is_finished(), "a dropped transfer is erased");
    }
}
