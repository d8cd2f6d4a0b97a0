//! Demoted exec threads share the idle CPU per computer: a computer with
//! four spinning execs gets about what a computer with one gets.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentcomputer_sched::{CpuFairness, checkpoint, configure, exec_thread, join_group};

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) },
        0
    );
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A spinning exec of `computer`: works in small steps with a checkpoint
/// between them (as the runtimes do between commands), adding its CPU time
/// to `used` until `stop`.
fn spinner(
    computer: &'static str,
    used: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _exec = exec_thread();
        join_group(computer);
        let mut last = thread_cpu();
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(200) {
                std::hint::black_box(0u64);
            }
            checkpoint(|| stop.load(Ordering::Relaxed));
            let now = thread_cpu();
            used.fetch_add((now - last).as_micros() as u64, Ordering::Relaxed);
            last = now;
        }
    })
}

#[test]
fn a_computer_with_many_busy_execs_gets_no_more_than_one_with_a_single_one() {
    configure(CpuFairness {
        enabled: true,
        slice: Duration::from_millis(5),
        foreground: 8,
        background: 2,
    });
    let stop = Arc::new(AtomicBool::new(false));
    let many = Arc::new(AtomicU64::new(0));
    let one = Arc::new(AtomicU64::new(0));
    let mut threads: Vec<_> = (0..4)
        .map(|_| spinner("many", many.clone(), stop.clone()))
        .collect();
    threads.push(spinner("one", one.clone(), stop.clone()));
    // Demoted threads run on idle CPU only, so how long this takes depends
    // on the machine's load; wait until the single exec has had 300 ms.
    let deadline = Instant::now() + Duration::from_secs(120);
    while one.load(Ordering::Relaxed) < 300_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let (many, one) = (many.load(Ordering::Relaxed), one.load(Ordering::Relaxed));
    assert!(
        one >= 100_000,
        "the single exec got {one} µs of CPU in 120 s"
    );
    // Per thread the four-exec computer would get 4 times as much; per
    // computer about the same. The bound sits between the two: turns are
    // 20 ms and, on a loaded machine, idle CPU comes in bursts, so a run
    // of 300 ms can be off by a few turns either way.
    assert!(
        many * 2 <= one * 5,
        "four execs got {many} µs of CPU, the single one {one} µs"
    );
    let (demoted, _) = agentcomputer_sched::stats();
    assert!(demoted >= 5, "{demoted} threads demoted");
}
