//! A pool of exec threads that never hands a demoted thread to another
//! exec.
//!
//! Reusing a thread costs ~10 µs where starting one costs ~100 µs on a busy
//! two-core node, so runtimes keep their exec threads. But a thread the
//! governor demoted stays demoted when the agent may not raise priorities
//! again; the next exec on it would start as a hog. Each job here runs
//! registered with [`crate::exec_thread`], and a thread that is not clean
//! afterwards ends instead of waiting for the next job.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

struct Shared {
    name: &'static str,
    stack: usize,
    max_threads: usize,
    keep_alive: Duration,
    state: Mutex<State>,
    ready: Condvar,
}

/// A pool of named threads with a given stack size, each running one job
/// at a time as an exec thread.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

impl Pool {
    /// A pool of at most `max_threads` threads named `name` with `stack`
    /// bytes of stack; an idle thread ends after `keep_alive`.
    pub fn new(name: &'static str, stack: usize, max_threads: usize, keep_alive: Duration) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                name,
                stack,
                max_threads: max_threads.max(1),
                keep_alive,
                state: Mutex::new(State {
                    jobs: VecDeque::new(),
                    threads: 0,
                    idle: 0,
                }),
                ready: Condvar::new(),
            }),
        }
    }

    /// Runs `job` on an idle thread, a new one, or (all `max_threads`
    /// busy) the first to become free. Errors: no thread runs and none can
    /// be started (the job is dropped).
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let s = &self.shared;
        let mut state = s.state.lock();
        state.jobs.push_back(Box::new(job));
        if state.idle > state.jobs.len() - 1 {
            s.ready.notify_one();
            return Ok(());
        }
        if state.threads >= s.max_threads {
            return Ok(());
        }
        state.threads += 1;
        drop(state);
        if let Err(e) = start_thread(s.clone()) {
            let mut state = s.state.lock();
            state.threads -= 1;
            if state.threads == 0 {
                state.jobs.clear();
                return Err(e);
            }
        }
        Ok(())
    }
}

fn start_thread(shared: Arc<Shared>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(shared.name.into())
        .stack_size(shared.stack)
        .spawn(move || work(&shared))
        .map(drop)
}

fn work(s: &Arc<Shared>) {
    let mut state = s.state.lock();
    loop {
        let Some(job) = state.jobs.pop_front() else {
            state.idle += 1;
            let timeout = s.ready.wait_for(&mut state, s.keep_alive);
            state.idle -= 1;
            if timeout.timed_out() && state.jobs.is_empty() {
                state.threads -= 1;
                return;
            }
            continue;
        };
        drop(state);
        {
            let _exec = crate::exec_thread();
            job();
        }
        state = s.state.lock();
        if !crate::thread_is_clean() {
            crate::governor::note_retired();
            state.threads -= 1;
            // Hand any waiting job to a fresh thread.
            if !state.jobs.is_empty() && state.idle == 0 {
                state.threads += 1;
                drop(state);
                if start_thread(s.clone()).is_err() {
                    s.state.lock().threads -= 1;
                }
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_every_job_and_reuses_threads() {
        let pool = Pool::new("test-pool", 256 * 1024, 4, Duration::from_secs(5));
        let (tx, rx) = mpsc::channel();
        for i in 0..100 {
            let tx = tx.clone();
            pool.spawn(move || tx.send((i, std::thread::current().id())).unwrap())
                .unwrap();
        }
        let mut seen: Vec<_> = (0..100)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        let threads: std::collections::HashSet<_> = seen.iter().map(|(_, t)| *t).collect();
        seen.sort_by_key(|(i, _)| *i);
        assert_eq!(
            seen.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );
        assert!(threads.len() <= 4, "{} threads", threads.len());
    }

    #[test]
    fn a_thread_left_demoted_is_not_reused() {
        let pool = Pool::new("test-pool", 256 * 1024, 1, Duration::from_secs(5));
        let (tx, rx) = mpsc::channel();
        let tx1 = tx.clone();
        pool.spawn(move || {
            crate::governor::taint_for_test();
            tx1.send(std::thread::current().id()).unwrap();
        })
        .unwrap();
        let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        pool.spawn(move || {
            assert!(crate::thread_is_clean());
            tx.send(std::thread::current().id()).unwrap();
        })
        .unwrap();
        let second = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_ne!(first, second);
        assert!(crate::stats().1 >= 1);
    }

    #[test]
    fn jobs_beyond_max_threads_wait_for_a_free_thread() {
        let pool = Pool::new("test-pool", 256 * 1024, 1, Duration::from_secs(5));
        let (tx, rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let tx1 = tx.clone();
        pool.spawn(move || {
            release_rx.recv().unwrap();
            tx1.send(1).unwrap();
        })
        .unwrap();
        pool.spawn(move || tx.send(2).unwrap()).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        release_tx.send(()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 2);
    }
}
