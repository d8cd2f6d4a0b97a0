//! The governor: samples the CPU clocks of registered exec threads and
//! demotes those past their slice.

use parking_lot::{Condvar, Mutex};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::CpuFairness;

/// Longest pause between two samples.
const MAX_PERIOD: Duration = Duration::from_millis(10);
/// Shortest pause between two samples.
const MIN_PERIOD: Duration = Duration::from_millis(1);
/// Nice value of the fallback demotion.
const FALLBACK_NICE: libc::c_int = 19;
/// Longest a parked thread sleeps before it looks at its exec's stop flag
/// again (the runtimes wait 250 ms for an exec thread to notice a stop).
const PARK_RECHECK: Duration = Duration::from_millis(50);

/// What a demoted thread and the governor share: whether it may run now.
struct Slot {
    /// Set by the governor once the thread is demoted; cleared never (the
    /// slot lives for one exec).
    demoted: AtomicBool,
    /// The thread holds a background turn (or is not demoted).
    allowed: AtomicBool,
    lock: Mutex<()>,
    turn: Condvar,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            demoted: AtomicBool::new(false),
            allowed: AtomicBool::new(true),
            lock: Mutex::new(()),
            turn: Condvar::new(),
        }
    }

    fn set_allowed(&self, allowed: bool) {
        let _guard = self.lock.lock();
        self.allowed.store(allowed, Ordering::Release);
        if allowed {
            self.turn.notify_one();
        }
    }
}

struct Entry {
    tid: libc::pid_t,
    clock: libc::clockid_t,
    start: Duration,
    demoted: bool,
    /// Holds a foreground place since this instant.
    place: Option<Instant>,
    /// The computer the exec belongs to ([`join_group`]); 0 until told.
    group: u64,
    slot: Arc<Slot>,
    /// Holds a background turn since this instant.
    turn: Option<Instant>,
    /// When its last background turn ended (or it was demoted).
    last_turn: Instant,
}

/// Registered threads and the order in which computers get background
/// turns.
#[derive(Default)]
struct Threads {
    entries: HashMap<u64, Entry>,
    /// Groups with demoted threads, next to get a turn first.
    rotation: VecDeque<u64>,
}

/// The line for foreground places.
#[derive(Default)]
struct Line {
    held: usize,
    next_ticket: u64,
    waiting: std::collections::VecDeque<u64>,
}

struct Governor {
    fairness: Mutex<CpuFairness>,
    threads: Mutex<Threads>,
    wake: Condvar,
    line: Mutex<Line>,
    line_moved: Condvar,
    next_id: AtomicU64,
    started: AtomicBool,
    demoted: AtomicU64,
    retired: AtomicU64,
    /// `SCHED_IDLE` was refused once: use nice instead.
    no_idle_policy: AtomicBool,
}

fn governor() -> &'static Governor {
    static G: OnceLock<Governor> = OnceLock::new();
    G.get_or_init(|| Governor {
        fairness: Mutex::new(CpuFairness::default()),
        threads: Mutex::new(Threads::default()),
        wake: Condvar::new(),
        line: Mutex::new(Line::default()),
        line_moved: Condvar::new(),
        next_id: AtomicU64::new(0),
        started: AtomicBool::new(false),
        demoted: AtomicU64::new(0),
        retired: AtomicU64::new(0),
        no_idle_policy: AtomicBool::new(false),
    })
}

pub(crate) fn configure(fairness: CpuFairness) {
    *governor().fairness.lock() = fairness;
}

fn fairness() -> CpuFairness {
    *governor().fairness.lock()
}

pub(crate) fn stats() -> (u64, u64) {
    let g = governor();
    (
        g.demoted.load(Ordering::Relaxed),
        g.retired.load(Ordering::Relaxed),
    )
}

pub(crate) fn note_retired() {
    governor().retired.fetch_add(1, Ordering::Relaxed);
}

thread_local! {
    /// This thread was demoted and could not return to normal priority.
    static TAINTED: Cell<bool> = const { Cell::new(false) };
    /// The registration of the exec running on this thread.
    static CURRENT: RefCell<Option<(u64, Arc<Slot>)>> = const { RefCell::new(None) };
}

/// Tells the governor which computer the exec on this thread belongs to,
/// by any key that names it (its database path): demoted threads get
/// background turns per computer, so a computer with many busy execs gets
/// no more of the idle CPU than one with a single busy exec. Does nothing
/// on a thread that is not registered ([`exec_thread`]).
pub fn join_group(key: &(impl std::hash::Hash + ?Sized)) {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let group = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
    let Some(id) = CURRENT.with(|c| c.borrow().as_ref().map(|(id, _)| *id)) else {
        return;
    };
    let mut threads = governor().threads.lock();
    if let Some(e) = threads.entries.get_mut(&id) {
        e.group = group;
    }
}

/// A safe point of an exec thread: returns at once unless the thread was
/// demoted and does not hold a background turn, in which case it blocks
/// until it is given one or `stopped()` says the exec must end (checked
/// every 50 ms). Runtimes call it where the thread holds no lock another
/// exec could need: between shell commands, in QuickJS's interrupt
/// handler.
pub fn checkpoint(stopped: impl Fn() -> bool) {
    let slot = CURRENT.with(|c| c.borrow().as_ref().map(|(_, s)| Arc::clone(s)));
    let Some(slot) = slot else {
        return;
    };
    if slot.allowed.load(Ordering::Acquire) {
        return;
    }
    let mut guard = slot.lock.lock();
    while !slot.allowed.load(Ordering::Acquire) && !stopped() {
        slot.turn.wait_for(&mut guard, PARK_RECHECK);
    }
}

/// Whether this thread runs at the priority it was created with, so that
/// another exec may run on it. False after an exec on it was demoted and
/// the kernel refused to undo that.
pub fn thread_is_clean() -> bool {
    !TAINTED.with(Cell::get)
}

/// Marks this thread as unable to return to normal priority, as a
/// demotion without `CAP_SYS_NICE` leaves it.
#[cfg(test)]
pub(crate) fn taint_for_test() {
    TAINTED.with(|t| t.set(true));
}

/// The current thread's registration as an exec thread; dropping it (on
/// the same thread, at the end of the exec) unregisters the thread and
/// returns it to normal priority if it was demoted.
pub struct ExecThread {
    id: Option<u64>,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Waits for a foreground place, first come first served.
fn enter_foreground(g: &Governor, places: usize) {
    let mut line = g.line.lock();
    let ticket = line.next_ticket;
    line.next_ticket += 1;
    line.waiting.push_back(ticket);
    while !(line.waiting.front() == Some(&ticket) && line.held < places.max(1)) {
        g.line_moved.wait(&mut line);
    }
    line.waiting.pop_front();
    line.held += 1;
    drop(line);
    // The next in line may fit too.
    g.line_moved.notify_all();
}

fn leave_foreground(g: &Governor) {
    g.line.lock().held -= 1;
    g.line_moved.notify_all();
}

/// Registers the current thread as running one exec, whose CPU time is
/// counted from now: waits for a foreground place first (see
/// [`crate::CpuFairness::foreground`]). With fairness off, or when the
/// thread's CPU clock is not available, the guard does nothing.
pub fn exec_thread() -> ExecThread {
    let inert = ExecThread {
        id: None,
        _not_send: std::marker::PhantomData,
    };
    let fairness = fairness();
    if !fairness.enabled {
        return inert;
    }
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the calling thread, alive; `clock` is a
    // valid out-pointer.
    if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } != 0 {
        return inert;
    }
    let Some(start) = cpu_time(clock) else {
        return inert;
    };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let g = governor();
    enter_foreground(g, fairness.foreground);
    // CPU used while waiting in line (none: blocked) is not counted.
    let start = cpu_time(clock).unwrap_or(start);
    let id = g.next_id.fetch_add(1, Ordering::Relaxed);
    let slot = Arc::new(Slot::new());
    g.threads.lock().entries.insert(
        id,
        Entry {
            tid,
            clock,
            start,
            demoted: false,
            place: Some(Instant::now()),
            group: 0,
            slot: Arc::clone(&slot),
            turn: None,
            last_turn: Instant::now(),
        },
    );
    CURRENT.with(|c| *c.borrow_mut() = Some((id, slot)));
    start_governor(g);
    g.wake.notify_one();
    ExecThread {
        id: Some(id),
        _not_send: std::marker::PhantomData,
    }
}

impl ExecThread {
    /// Whether the governor has demoted this thread (in this exec).
    pub fn demoted(&self) -> bool {
        let Some(id) = self.id else {
            return false;
        };
        let threads = governor().threads.lock();
        threads.entries.get(&id).is_some_and(|e| e.demoted)
    }
}

impl Drop for ExecThread {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return;
        };
        let g = governor();
        CURRENT.with(|c| *c.borrow_mut() = None);
        let entry = g.threads.lock().entries.remove(&id);
        if entry.as_ref().is_some_and(|e| e.turn.is_some()) {
            // Its turn goes to the next thread at the next sample.
            g.wake.notify_one();
        }
        let Some(entry) = entry else {
            return;
        };
        if entry.place.is_some() {
            leave_foreground(g);
        }
        if entry.demoted && !restore_self() {
            TAINTED.with(|t| t.set(true));
        }
    }
}

/// CPU time of the thread behind `clock`.
fn cpu_time(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn start_governor(g: &'static Governor) {
    if g.started.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("exec-governor".into())
        .stack_size(256 * 1024)
        .spawn(move || run(g));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the exec CPU governor; execs share the CPU per thread");
        g.started.store(false, Ordering::Release);
    }
}

/// The governor's loop: sleeps while no exec runs, else samples every
/// half slice (between 1 and 10 ms).
fn run(g: &'static Governor) {
    let mut threads = g.threads.lock();
    loop {
        while threads.entries.is_empty() {
            g.wake.wait(&mut threads);
        }
        let fairness = fairness();
        let slice = fairness.slice;
        let wall = slice * crate::FOREGROUND_WALL;
        let now = Instant::now();
        let Threads { entries, rotation } = &mut *threads;
        for entry in entries.values_mut().filter(|e| !e.demoted) {
            // The thread unregisters (under this lock) before it ends, so
            // its clock is valid here.
            let Some(used) = cpu_time(entry.clock) else {
                continue;
            };
            if used.saturating_sub(entry.start) > slice && demote(g, entry.tid) {
                entry.demoted = true;
                entry.last_turn = now;
                entry.slot.demoted.store(true, Ordering::Relaxed);
                if fairness.background > 0 {
                    entry.slot.set_allowed(false);
                }
                join_rotation(rotation, entry.group);
                g.demoted.fetch_add(1, Ordering::Relaxed);
            }
            let done = entry.demoted || entry.place.is_some_and(|t| now - t > wall);
            if done && entry.place.take().is_some() {
                leave_foreground(g);
            }
        }
        if fairness.background > 0 {
            hand_out_turns(
                entries,
                rotation,
                fairness.background,
                slice * TURN_SLICES,
                now,
            );
        }
        let period = (slice / 2).clamp(MIN_PERIOD, MAX_PERIOD);
        g.wake.wait_for(&mut threads, period);
    }
}

/// Puts `group` in the rotation of background turns when one of its
/// threads is demoted. A computer already in it keeps its place; one that
/// had no demoted thread goes first: it has had no idle CPU while the
/// others took turns (fair queuing places a newly active flow at the
/// current head, not behind every backlogged one). Without this, an exec
/// of a quiet computer demoted once (a cold first exec uses 14 ms of CPU in
/// a debug build) waited a whole round: 200 busy computers × one 20 ms
/// turn / 2 turns at once = 2 s, and 30 s was measured under I/O bombs.
/// It cannot take more than that one turn per demotion: a computer's
/// further threads wait for its next turn in the round as before.
fn join_rotation(rotation: &mut VecDeque<u64>, group: u64) {
    if !rotation.contains(&group) {
        rotation.push_front(group);
    }
}

/// Length of a background turn, in CPU slices of wall time.
const TURN_SLICES: u32 = 4;

/// Gives background turns to demoted threads: at most `turns` at once,
/// each for `length` of wall time, one computer (group) at a time in
/// round-robin order and, within a computer, the thread that waited
/// longest. A computer gets a second turn at once only when no other
/// computer waits for one; a turn is only taken back when another thread
/// waits for it.
fn hand_out_turns(
    entries: &mut HashMap<u64, Entry>,
    rotation: &mut VecDeque<u64>,
    turns: usize,
    length: Duration,
    now: Instant,
) {
    let waiting = entries
        .values()
        .filter(|e| e.demoted && e.turn.is_none())
        .count();
    if waiting == 0 {
        return;
    }
    // Ended turns (expired, while others wait).
    for e in entries.values_mut() {
        if e.turn.is_some_and(|t| now - t >= length) {
            e.turn = None;
            e.last_turn = now;
            e.slot.set_allowed(false);
        }
    }
    rotation.retain(|g| entries.values().any(|e| e.demoted && e.group == *g));
    // A thread demoted before it named its computer ([`join_group`]) joined
    // the rotation under the group it had then: its computer joins now.
    for e in entries.values().filter(|e| e.demoted) {
        join_rotation(rotation, e.group);
    }
    let mut held = entries.values().filter(|e| e.turn.is_some()).count();
    while held < turns {
        let holds = |g: u64| entries.values().any(|e| e.group == g && e.turn.is_some());
        let wants = |g: u64| {
            entries
                .values()
                .any(|e| e.group == g && e.demoted && e.turn.is_none())
        };
        let pick = rotation
            .iter()
            .position(|&g| wants(g) && !holds(g))
            .or_else(|| rotation.iter().position(|&g| wants(g)));
        let Some(i) = pick else {
            break;
        };
        let group = rotation.remove(i).expect("index from position");
        rotation.push_back(group);
        let next = entries
            .values_mut()
            .filter(|e| e.group == group && e.demoted && e.turn.is_none())
            .min_by_key(|e| e.last_turn)
            .expect("the group wants a turn");
        next.turn = Some(now);
        next.slot.set_allowed(true);
        held += 1;
    }
}

/// Moves thread `tid` to `SCHED_IDLE`, or failing that to nice 19.
fn demote(g: &Governor, tid: libc::pid_t) -> bool {
    if !g.no_idle_policy.load(Ordering::Relaxed) {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is valid; `tid` names a thread of this process.
        if unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) } == 0 {
            return true;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            return false;
        }
        tracing::warn!(error = %err, "SCHED_IDLE refused; demoting busy exec threads to nice {FALLBACK_NICE} instead");
        g.no_idle_policy.store(true, Ordering::Relaxed);
    }
    // SAFETY: plain syscall on a thread id of this process.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, FALLBACK_NICE) == 0 }
}

/// Returns the calling thread to `SCHED_OTHER` at nice 0; false when the
/// kernel refuses (no `CAP_SYS_NICE`, `RLIMIT_NICE` too low).
fn restore_self() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is valid; 0 is the calling thread.
    let policy_ok = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } == 0;
    // SAFETY: gettid has no preconditions; setpriority on our own thread.
    let nice_ok =
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 0) } == 0;
    policy_ok && nice_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> libc::c_int {
        // SAFETY: 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn a_spinning_thread_is_demoted_and_restored() {
        configure(CpuFairness {
            enabled: true,
            slice: Duration::from_millis(5),
            foreground: 2,
            background: 2,
        });
        std::thread::spawn(|| {
            let guard = exec_thread();
            let t = std::time::Instant::now();
            while !guard.demoted() && t.elapsed() < Duration::from_secs(10) {
                std::hint::black_box(0u64);
            }
            assert!(guard.demoted(), "not demoted after 10 s of spinning");
            let p = policy();
            assert!(p == libc::SCHED_IDLE || p == libc::SCHED_OTHER, "{p}");
            drop(guard);
            // Root (CAP_SYS_NICE) in the test environment can go back;
            // without it the thread is marked unfit for reuse.
            assert_eq!(policy() == libc::SCHED_OTHER, thread_is_clean());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn execs_past_the_foreground_places_wait_in_line() {
        configure(CpuFairness {
            enabled: true,
            slice: Duration::from_millis(5),
            foreground: 2,
            background: 2,
        });
        let sleepers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(|| {
                    let _guard = exec_thread();
                    std::thread::sleep(Duration::from_millis(500));
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(5));
        // Both places are held by sleepers (other tests may hold more), so
        // this one waits until one ends or has held its place for
        // FOREGROUND_WALL slices of wall time (25 ms), not for 500 ms.
        let t = Instant::now();
        let guard = exec_thread();
        let waited = t.elapsed();
        drop(guard);
        assert!(waited < Duration::from_millis(400), "{waited:?}");
        for s in sleepers {
            s.join().unwrap();
        }
        assert!(g_line_is_empty());
    }

    fn demoted_entry(group: u64, last_turn: Instant) -> Entry {
        Entry {
            tid: 0,
            clock: 0,
            start: Duration::ZERO,
            demoted: true,
            place: None,
            group,
            slot: Arc::new(Slot::new()),
            turn: None,
            last_turn,
        }
    }

    #[test]
    fn a_newly_demoted_computer_gets_the_next_turn() {
        let start = Instant::now();
        let mut entries = HashMap::new();
        let mut rotation = VecDeque::new();
        // Three busy computers, the first holding the only turn.
        for (id, group) in [(1, 10), (2, 20), (3, 30)] {
            entries.insert(id, demoted_entry(group, start));
            join_rotation(&mut rotation, group);
        }
        hand_out_turns(
            &mut entries,
            &mut rotation,
            1,
            Duration::from_millis(20),
            start,
        );
        let holder = entries.values().find(|e| e.turn.is_some()).unwrap().group;
        // A quiet computer's exec is demoted: it is served when that turn
        // ends, before the computers that waited in the round.
        entries.insert(4, demoted_entry(40, start));
        join_rotation(&mut rotation, 40);
        // Joining again (a second demoted thread) keeps its place.
        join_rotation(&mut rotation, 40);
        assert_eq!(rotation.iter().filter(|&&g| g == 40).count(), 1);
        let later = start + Duration::from_millis(25);
        hand_out_turns(
            &mut entries,
            &mut rotation,
            1,
            Duration::from_millis(20),
            later,
        );
        let next = entries.values().find(|e| e.turn.is_some()).unwrap().group;
        assert_ne!(next, holder);
        assert_eq!(next, 40, "the quiet computer waited behind the round");
        // Then the round goes on with the computers that were waiting.
        let after = later + Duration::from_millis(25);
        hand_out_turns(
            &mut entries,
            &mut rotation,
            1,
            Duration::from_millis(20),
            after,
        );
        let third = entries.values().find(|e| e.turn.is_some()).unwrap().group;
        assert!(third != 40 && third != holder, "{third}");
    }

    #[test]
    fn a_thread_demoted_before_it_names_its_computer_still_gets_turns() {
        // The governor may demote a thread in the moment between its
        // registration and `join_group` (a cold exec under load): it joins
        // the rotation as group 0, then names its computer.
        let start = Instant::now();
        let mut entries = HashMap::new();
        let mut rotation = VecDeque::new();
        entries.insert(1, demoted_entry(0, start));
        join_rotation(&mut rotation, 0);
        entries.get_mut(&1).unwrap().group = 77;
        hand_out_turns(
            &mut entries,
            &mut rotation,
            1,
            Duration::from_millis(20),
            start,
        );
        assert!(
            entries[&1].turn.is_some(),
            "a demoted thread was left without a turn"
        );
        assert_eq!(rotation, [77]);
    }

    fn g_line_is_empty() -> bool {
        governor().line.lock().waiting.is_empty()
    }

    #[test]
    fn a_short_exec_keeps_normal_priority() {
        std::thread::spawn(|| {
            let guard = exec_thread();
            std::thread::sleep(Duration::from_millis(50));
            assert!(!guard.demoted());
            assert_eq!(policy(), libc::SCHED_OTHER);
            drop(guard);
            assert!(thread_is_clean());
        })
        .join()
        .unwrap();
    }
}
