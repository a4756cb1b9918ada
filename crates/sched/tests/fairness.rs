//! Fair sharing between submission groups: one request with many choices does not starve a
//! small request submitted after it, gives back its slots when alone again, and every output is
//! the same as when each request runs alone.

mod common;

use std::collections::BTreeMap;

use common::{config, prompt, req, run_to_completion, step};
use oxllm_core::ReqId;
use oxllm_sched::Scheduler;
use proptest::prelude::*;

const VOCAB: u32 = 1000;

/// Requests `first..first + n`, all in group `first` (like `n` choices of one API request).
fn add_group(sched: &mut Scheduler, first: ReqId, n: u64, prompt_len: usize, max_tokens: usize) {
    for id in first..first + n {
        sched
            .add_request(req(id, prompt(prompt_len, id as u32 % 7), max_tokens).with_group(first))
            .unwrap();
    }
}

fn group_running(sched: &Scheduler, first: ReqId, n: u64) -> usize {
    sched
        .running_ids()
        .iter()
        .filter(|&&id| (first..first + n).contains(&id))
        .count()
}

#[test]
fn a_small_request_is_admitted_while_a_many_choice_request_holds_every_slot() {
    // 4 slots; group 1 has 16 choices of 200 tokens each; request 100 arrives later with 3.
    let mut sched = Scheduler::new(config(64, 4, 4, 1024)).unwrap();
    add_group(&mut sched, 1, 16, 8, 200);
    for _ in 0..5 {
        step(&mut sched, VOCAB);
    }
    assert_eq!(
        group_running(&sched, 1, 16),
        4,
        "alone, the group takes every slot"
    );
    sched.add_request(req(100, prompt(8, 3), 3)).unwrap();
    let (out, _) = step(&mut sched, VOCAB);
    assert_eq!(out.preempted.len(), 1, "one choice gives up its slot");
    assert!(out.preempted[0] >= 1 && out.preempted[0] <= 16);
    assert!(out.scheduled.iter().any(|s| s.req_id == 100));
    let mut finished_at = None;
    for n in 0..10 {
        let (_, updates) = step(&mut sched, VOCAB);
        if updates
            .iter()
            .any(|u| u.req_id == 100 && u.finish_reason.is_some())
        {
            finished_at = Some(n);
            break;
        }
    }
    assert!(
        finished_at.is_some(),
        "the small request finished within its 3 tokens' steps"
    );
    // Alone again, the group takes every slot back.
    step(&mut sched, VOCAB);
    assert_eq!(group_running(&sched, 1, 16), 4);
}

#[test]
fn two_many_choice_requests_split_the_slots_evenly() {
    let mut sched = Scheduler::new(config(128, 8, 4, 1024)).unwrap();
    add_group(&mut sched, 1, 16, 8, 100);
    step(&mut sched, VOCAB);
    assert_eq!(group_running(&sched, 1, 16), 8);
    add_group(&mut sched, 50, 16, 8, 100);
    // One slot changes hands per step until both hold their share.
    for n in 1..=4 {
        let (out, _) = step(&mut sched, VOCAB);
        assert_eq!(out.preempted.len(), 1);
        assert_eq!(group_running(&sched, 50, 16), n);
    }
    assert_eq!(group_running(&sched, 1, 16), 4);
    assert_eq!(group_running(&sched, 50, 16), 4);
    // Stable: no more preemptions while both keep their share.
    for _ in 0..10 {
        let (out, _) = step(&mut sched, VOCAB);
        assert!(out.preempted.is_empty());
    }
}

#[test]
fn out_of_blocks_the_largest_group_pays() {
    // 24 usable blocks of 4 tokens; group 1 (3 choices) and request 10 alone grow until the
    // pool runs out: the victim is always one of group 1's choices while it runs more.
    let mut cfg = config(64, 8, 4, 25);
    cfg.enable_prefix_caching = false;
    let mut sched = Scheduler::new(cfg).unwrap();
    add_group(&mut sched, 1, 3, 4, 28);
    sched.add_request(req(10, prompt(4, 5), 28)).unwrap();
    let mut victims = Vec::new();
    for _ in 0..200 {
        if !sched.has_work() {
            break;
        }
        let running: Vec<ReqId> = sched.running_ids().to_vec();
        let (out, _) = step(&mut sched, VOCAB);
        for &v in &out.preempted {
            let group1 = running.iter().filter(|&&id| id < 10).count();
            if group1 > 1 {
                assert!(v < 10, "request 10 preempted while group 1 ran {group1}");
            }
            victims.push(v);
        }
    }
    assert!(
        !victims.is_empty(),
        "the small pool must force a preemption"
    );
    assert!(!sched.has_work());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the groups, arrivals, slots and pool, the invariants hold after every step and
    /// every request finishes with the output it has alone.
    #[test]
    fn fair_scheduling_keeps_outputs_and_invariants(
        groups in prop::collection::vec((1u64..6, 1usize..10, 1usize..12, 0usize..6), 1..5),
        max_seqs in 1usize..6,
        num_blocks in 12usize..40,
        budget in 8usize..40,
    ) {
        let mut cfg = config(budget, max_seqs, 4, num_blocks);
        cfg.max_model_len = 48;
        let mut sched = Scheduler::new(cfg).unwrap();
        let mut reference = Scheduler::new(config(4096, 64, 4, 1024)).unwrap();
        let mut arrivals: BTreeMap<usize, Vec<(ReqId, u64, usize, usize)>> = BTreeMap::new();
        let mut next: ReqId = 1;
        for &(n, plen, max_tokens, at_step) in &groups {
            arrivals.entry(at_step).or_default().push((next, n, plen, max_tokens));
            add_group(&mut reference, next, n, plen, max_tokens);
            next += n;
        }
        let expected = run_to_completion(&mut reference, VOCAB, 10_000);
        let mut outputs: BTreeMap<ReqId, Vec<u32>> = BTreeMap::new();
        for step_no in 0..5_000 {
            if let Some(list) = arrivals.remove(&step_no) {
                for (first, n, plen, max_tokens) in list {
                    add_group(&mut sched, first, n, plen, max_tokens);
                }
            }
            if !sched.has_work() && arrivals.is_empty() {
                break;
            }
            if !sched.has_work() {
                continue;
            }
            let (_, updates) = step(&mut sched, VOCAB);
            sched.check_invariants().map_err(TestCaseError::fail)?;
            for u in updates {
                outputs.entry(u.req_id).or_default().extend(u.new_token_ids);
            }
        }
        prop_assert!(!sched.has_work(), "every request finishes");
        for (id, (tokens, _)) in expected {
            prop_assert_eq!(outputs.get(&id), Some(&tokens), "request {}", id);
        }
    }
}
