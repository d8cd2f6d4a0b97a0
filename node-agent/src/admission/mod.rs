//! Admission control of execs: how many run at once on one computer and on
//! the whole agent, and how much memory they reserve together.
//!
//! Every exec asks for a [`Permit`] before it starts, reserving its memory
//! budget (the most its runtime lets it allocate). The reservation is sized
//! so that a computer with no exec running is never shut out by the others:
//! while an exec slot is free, at least [`AdmissionConfig::min_exec_memory_bytes`]
//! of the pool is held back for each free slot, and an exec that asked for
//! no particular budget ([`MemoryAsk::AtMost`]) is given the default budget
//! only as far as that reserve and its computer's fair share of the pool
//! (pool / computers running execs) allow, never less than the floor.
//! An exec that does not fit waits in a bounded queue for at most
//! [`AdmissionConfig::queue_wait`]; when a permit is released the waiting
//! execs of the computers running the fewest execs go first (round-robin
//! among equals, first come, first served within one computer). An exec
//! still waiting at the end of the wait, or finding the queue full, is
//! refused with RESOURCE_EXHAUSTED and a message naming the limit and its
//! value. The model is written in docs/isolation.md.

mod config;
mod metrics;
mod queue;
mod refusal;

pub use config::*;
pub use queue::{Admission, Permit};
pub use refusal::{Limit, Refusal};
// Shared by the files of this module (`use super::*` in each).
use agentcomputer_runtime_contract::human_bytes;
pub(in crate::admission) use metrics::Metrics;

#[cfg(test)]
mod tests {
    use super::MemoryAsk::{AtMost, Exactly};
    use super::*;
    use agentcomputer_sched::CpuFairness;
    use std::time::Duration;
    use tonic::Status;

    fn config(max_execs: usize, per_computer: usize, memory: u64) -> AdmissionConfig {
        AdmissionConfig {
            max_execs,
            max_execs_per_computer: per_computer,
            exec_memory_bytes: memory,
            // No floor: these tests check the plain limits.
            min_exec_memory_bytes: 0,
            largest_exec_memory_bytes: 0,
            quiet_reserve_bytes: 0,
            max_queued: 16,
            queue_wait: Duration::from_secs(5),
            cpu: CpuFairness::default(),
        }
    }

    #[test]
    fn defaults_follow_the_formula() {
        let c = AdmissionConfig::derive(2, 24 << 30);
        assert_eq!(
            (
                c.max_execs,
                c.max_execs_per_computer,
                c.exec_memory_bytes,
                c.max_queued
            ),
            (256, 8, 12 << 30, 256)
        );
        assert!(available_memory().is_some_and(|m| m > 0));
    }

    #[tokio::test]
    async fn each_limit_refuses_with_its_name_and_value() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_millis(50),
            ..config(2, 1, 300)
        });
        let _p1 = a.admit("a", Exactly(100)).await.unwrap();
        let e = a.admit("a", Exactly(100)).await.unwrap_err();
        assert_eq!(e.limit, Limit::ExecsPerComputer);
        assert!(e.to_string().contains("max_execs_per_computer = 1"), "{e}");
        let _p2 = a.admit("b", Exactly(100)).await.unwrap();
        let e = a.admit("c", Exactly(100)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Execs);
        assert!(e.to_string().contains("max_execs = 2"), "{e}");
        let e = a.admit("c", Exactly(301)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Memory);
        assert!(e.to_string().contains("exec_memory = 300 bytes"), "{e}");
        let status = Status::from(e);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(a.load(), (2, 0));
    }

    #[tokio::test]
    async fn memory_reservations_add_up() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_millis(20),
            ..config(10, 10, 1 << 30)
        });
        let p = a.admit("a", Exactly(768 << 20)).await.unwrap();
        let e = a.admit("b", Exactly(512 << 20)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Memory);
        assert!(e.to_string().contains("budget of 512 MiB"), "{e}");
        assert!(e.to_string().contains("exec_memory = 1 GiB"), "{e}");
        drop(p);
        let _p = a.admit("b", Exactly(512 << 20)).await.unwrap();
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let a = Admission::new(AdmissionConfig {
            max_queued: 1,
            ..config(1, 1, 1 << 30)
        });
        let _p = a.admit("a", Exactly(1)).await.unwrap();
        let waiting = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("a", Exactly(1)).await.map(drop) })
        };
        while a.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        let e = a.admit("b", Exactly(1)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Queue);
        assert!(e.to_string().contains("exec_queue = 1"), "{e}");
        waiting.abort();
    }

    #[tokio::test]
    async fn a_queued_exec_starts_when_a_permit_is_released() {
        let a = Admission::new(config(1, 1, 1 << 30));
        let first = a.admit("a", Exactly(1)).await.unwrap();
        let second = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("a", Exactly(1)).await })
        };
        while a.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(a.load(), (1, 1));
        drop(first);
        let permit = second.await.unwrap().unwrap();
        assert_eq!(a.load(), (1, 0));
        drop(permit);
        assert_eq!(a.load(), (0, 0));
    }

    #[tokio::test]
    async fn the_queue_serves_computers_in_turn() {
        let a = Admission::new(AdmissionConfig {
            max_queued: 100,
            ..config(1, 1, 1 << 30)
        });
        let running = a.admit("busy", Exactly(1)).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // Five execs of "busy" queue up before one of "quiet".
        for name in ["busy", "busy", "busy", "busy", "busy", "quiet"] {
            let queue = a.clone();
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let permit = queue.admit(name, Exactly(1)).await.unwrap();
                tx.send(name).unwrap();
                tokio::task::yield_now().await;
                drop(permit);
            }));
            while a.load().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(running);
        let mut order = Vec::new();
        for _ in 0..6 {
            order.push(rx.recv().await.unwrap());
        }
        // "quiet" is served on its first turn, after one "busy".
        assert_eq!(order[..2], ["busy", "quiet"], "{order:?}");
    }

    const MIB: u64 = 1 << 20;

    /// The defaults' shape on a small pool: 4 GiB, a 32 MiB floor, 256 MiB
    /// budgets, 64 execs, 8 per computer.
    fn pooled(max_execs: usize) -> AdmissionConfig {
        AdmissionConfig {
            min_exec_memory_bytes: 32 * MIB,
            largest_exec_memory_bytes: 256 * MIB,
            queue_wait: Duration::from_millis(50),
            ..config(max_execs, 8, 4096 * MIB)
        }
    }

    #[tokio::test]
    async fn a_quiet_computer_is_admitted_beside_many_busy_ones() {
        let a = Admission::new(pooled(64));
        assert_eq!(a.inner.slots, 64);
        let mut held = Vec::new();
        // 63 computers each start one exec asking for the default budget:
        // all are admitted, the pool is never overdrawn, and the budgets
        // shrink towards the floor as the pool fills.
        for i in 0..63 {
            let p = a
                .admit(&format!("busy{i}"), AtMost(256 * MIB))
                .await
                .unwrap();
            assert!((32 * MIB..=256 * MIB).contains(&p.memory()), "{i}: {p:?}");
            held.push(p);
            let reserved: u64 = held.iter().map(Permit::memory).sum();
            assert!(reserved <= 4096 * MIB, "{i}: {reserved}");
        }
        assert_eq!(held[0].memory(), 256 * MIB);
        assert_eq!(held[62].memory(), 32 * MIB);
        // The last slot still has its floor for a newcomer, at once.
        let quiet = a.admit("quiet", AtMost(256 * MIB)).await.unwrap();
        assert!(quiet.memory() >= 32 * MIB, "{quiet:?}");
        // Then the slots are full: the next one waits and is refused.
        let e = a.admit("late", AtMost(256 * MIB)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Execs);
        // A budget asked for exactly is not shrunk: refused while the
        // reserve holds, given whole once room is back.
        drop(quiet);
        let e = a.admit("exact", Exactly(256 * MIB)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Memory, "{e}");
        assert!(e.to_string().contains("min_exec_memory = 32 MiB"), "{e}");
        held.truncate(5);
        let p = a.admit("exact", Exactly(256 * MIB)).await.unwrap();
        assert_eq!(p.memory(), 256 * MIB);
    }

    #[tokio::test]
    async fn slots_are_bounded_by_the_floor_and_a_default_budget_on_an_idle_agent() {
        // 1 GiB: 24 floors of 32 MiB beside one 256 MiB budget.
        let c = AdmissionConfig {
            exec_memory_bytes: 1024 * MIB,
            ..pooled(256)
        };
        assert_eq!(c.slots(), 25);
        let a = Admission::new(c);
        let first = a.admit("a", Exactly(256 * MIB)).await.unwrap();
        assert_eq!(first.memory(), 256 * MIB);
        let mut rest = Vec::new();
        for i in 0..24 {
            rest.push(a.admit(&format!("c{i}"), AtMost(256 * MIB)).await.unwrap());
        }
        assert!(rest.iter().all(|p| p.memory() == 32 * MIB));
        let e = a.admit("z", AtMost(256 * MIB)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Execs);
        assert!(e.to_string().contains("runs 25 execs"), "{e}");
        assert!(e.to_string().contains("max_execs = 256"), "{e}");
    }

    #[tokio::test]
    async fn a_computer_gets_no_more_than_its_fair_share_of_the_pool() {
        // 16 GiB, 65 slots: the reserve does not bite before the share.
        let a = Admission::new(AdmissionConfig {
            exec_memory_bytes: 16384 * MIB,
            ..pooled(65)
        });
        let mut held = Vec::new();
        for i in 0..63 {
            held.push(a.admit(&format!("c{i}"), AtMost(256 * MIB)).await.unwrap());
        }
        assert!(held.iter().all(|p| p.memory() == 256 * MIB));
        // 63 computers share the pool: 16384 / 63 = 260 MiB each. c0
        // already holds 256 MiB, so its second exec gets the floor.
        let second = a.admit("c0", AtMost(256 * MIB)).await.unwrap();
        assert_eq!(second.memory(), 32 * MIB);
        // A newcomer's share is 256 MiB; it gets what is left, 224 MiB.
        let newcomer = a.admit("c63", AtMost(256 * MIB)).await.unwrap();
        assert_eq!(newcomer.memory(), 224 * MIB);
    }

    #[tokio::test]
    async fn the_computer_running_fewest_is_served_first() {
        let a = Admission::new(AdmissionConfig {
            max_queued: 100,
            queue_wait: Duration::from_secs(5),
            ..config(2, 2, 1 << 30)
        });
        let busy = a.admit("busy", Exactly(1)).await.unwrap();
        let other = a.admit("other", Exactly(1)).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // "busy" (one running) queues first, then "quiet" (none running).
        for name in ["busy", "quiet"] {
            let queue = a.clone();
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let permit = queue.admit(name, Exactly(1)).await.unwrap();
                tx.send(name).unwrap();
                permit
            }));
            while a.load().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(other);
        assert_eq!(rx.recv().await.unwrap(), "quiet");
        drop(busy);
        assert_eq!(rx.recv().await.unwrap(), "busy");
    }

    #[tokio::test]
    async fn a_withdrawn_waiter_frees_its_place() {
        let a = Admission::new(config(1, 1, 1 << 30));
        let first = a.admit("a", Exactly(1)).await.unwrap();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("b", Exactly(1)).await.map(drop) })
        };
        while a.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(a.load(), (1, 0));
        drop(first);
        assert_eq!(a.load(), (0, 0));
    }

    #[tokio::test]
    async fn metrics_show_running_queued_and_refusals() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_millis(10),
            ..config(4, 1, 1 << 30)
        });
        let registry = prometheus::Registry::new();
        a.register_metrics(&registry).unwrap();
        let _p = a.admit("a", Exactly(1000)).await.unwrap();
        a.admit("a", Exactly(1)).await.unwrap_err();
        let families = registry.gather();
        let value = |name: &str, label: Option<&str>| -> f64 {
            let f = families.iter().find(|f| f.name() == name).unwrap();
            let m = f
                .get_metric()
                .iter()
                .find(|m| label.is_none_or(|l| m.get_label().iter().any(|p| p.value() == l)))
                .unwrap();
            if m.get_counter().get_value() != 0.0 {
                m.get_counter().get_value()
            } else {
                m.get_gauge().get_value()
            }
        };
        assert_eq!(value("agentcomputer_execs_running", None), 1.0);
        assert_eq!(value("agentcomputer_execs_queued", None), 0.0);
        assert_eq!(
            value("agentcomputer_exec_memory_reserved_bytes", None),
            1000.0
        );
        assert_eq!(
            value(
                "agentcomputer_execs_refused_total",
                Some("max_execs_per_computer")
            ),
            1.0
        );
        assert_eq!(value("agentcomputer_exec_limit", Some("max_execs")), 4.0);
    }

    /// One computer with a large default and many execs cannot push a
    /// quiet computer's first exec below its default budget: an agent with
    /// 830 MiB of exec memory (a 2 GiB container), a computer of
    /// `limits.memory: 4Gi` starting 8 execs, another asking for its
    /// default 256 MiB.
    #[tokio::test]
    async fn a_quiet_computer_gets_its_default_beside_a_greedy_one() {
        let mib = 1u64 << 20;
        let a = Admission::new(AdmissionConfig {
            exec_memory_bytes: 830 * mib,
            queue_wait: Duration::from_millis(50),
            ..AdmissionConfig::derive(2, 1660 * mib)
        });
        assert_eq!(a.config().slots(), 11);
        let mut greedy = Vec::new();
        for _ in 0..8 {
            greedy.push(a.admit("greedy", AtMost(4096 * mib)).await.unwrap());
        }
        let taken: u64 = greedy.iter().map(Permit::memory).sum();
        assert!(taken <= (830 - 256) * mib, "{taken}");
        let quiet = a.admit("quiet", AtMost(256 * mib)).await.unwrap();
        assert_eq!(quiet.memory(), 256 * mib);
        // It runs a 150 MiB job that way; a second quiet computer waits
        // for room rather than take less than its floor.
        drop(quiet);
        let again = a.admit("quiet", AtMost(256 * mib)).await.unwrap();
        assert_eq!(again.memory(), 256 * mib);
    }

    /// While another computer waits, one that runs execs gets no more
    /// than its fair share: the waiter is served when room frees.
    #[tokio::test]
    async fn a_busy_computer_stays_within_its_fair_share_while_another_waits() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_secs(5),
            ..config(8, 8, 1000)
        });
        let first = a.admit("busy", Exactly(400)).await.unwrap();
        // The quiet one asks for more than is free and waits.
        let waiting = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("quiet", Exactly(700)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // 400 + 200 would pass the busy one's half of the whole.
        let more = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("busy", Exactly(200)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!more.is_finished(), "granted past its fair share");
        drop(first);
        let got = waiting.await.unwrap().unwrap();
        assert_eq!(got.memory(), 700);
        drop(got);
        assert_eq!(more.await.unwrap().unwrap().memory(), 200);
    }
}
