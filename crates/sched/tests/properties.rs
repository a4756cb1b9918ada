//! Property tests: random add / schedule / update / abort sequences over a small pool keep the
//! scheduler's and the KV cache's invariants after every step, and every request finishes once
//! arrivals stop; outputs do not depend on pool size, budget or prefix caching.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::{fake_next_token, run_to_completion, step_states, FakeStates};
use oxllm_core::{BlockId, FinishReason, ReqId, TokenId};
use oxllm_sched::{RecurrentStateConfig, Request, Scheduler, SchedulerConfig};
use proptest::prelude::*;

const VOCAB: u32 = 16;

#[derive(Clone, Debug)]
enum Op {
    Add {
        prefix: u8,
        prefix_len: usize,
        suffix: Vec<TokenId>,
        max_tokens: usize,
        stop: bool,
    },
    Step,
    Abort {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0u8..3, 0usize..24, prop::collection::vec(0u32..VOCAB, 0..8), 1usize..12, any::<bool>())
            .prop_map(|(prefix, prefix_len, suffix, max_tokens, stop)| Op::Add {
                prefix, prefix_len, suffix, max_tokens, stop,
            }),
        6 => Just(Op::Step),
        1 => any::<usize>().prop_map(|pick| Op::Abort { pick }),
    ]
}

/// Sometimes a hybrid model: few state slots (fewer than `max_num_seqs` at times), few
/// checkpoints (so they are evicted), short intervals (so hits and in-chunk checkpoints are
/// frequent).
fn states() -> impl Strategy<Value = Option<RecurrentStateConfig>> {
    prop::option::of((1usize..5, 0usize..5, 1usize..4).prop_map(
        |(num_slots, num_checkpoints, interval)| RecurrentStateConfig {
            num_slots,
            num_checkpoints,
            checkpoint_interval_blocks: interval,
        },
    ))
}

fn config() -> impl Strategy<Value = SchedulerConfig> {
    (
        1usize..33,
        1usize..6,
        1usize..5,
        3usize..24,
        any::<bool>(),
        states(),
        prop::option::of(1usize..8),
    )
        .prop_map(
            |(budget, max_seqs, block_size, num_blocks, caching, states, cap)| SchedulerConfig {
                max_num_batched_tokens: budget,
                max_prefill_beside_decode: cap,
                max_num_seqs: max_seqs,
                block_size,
                num_blocks,
                max_model_len: 48,
                enable_prefix_caching: caching,
                recurrent_states: states,
            },
        )
}

fn make_prompt(prefix: u8, prefix_len: usize, suffix: &[TokenId]) -> Vec<TokenId> {
    let mut tokens: Vec<TokenId> = (0..prefix_len as u32)
        .map(|i| (i * 5 + u32::from(prefix) * 3) % VOCAB)
        .collect();
    tokens.extend_from_slice(suffix);
    tokens
}

/// Checks one step's output and the state after it. `tables` holds each running request's
/// table from the previous step, to check append-only growth.
fn check_step(
    sched: &Scheduler,
    out: &oxllm_sched::SchedulerOutput,
    tables: &mut HashMap<ReqId, Vec<BlockId>>,
) -> Result<(), TestCaseError> {
    let cfg = sched.config();
    if let Err(e) = sched.check_invariants() {
        return Err(TestCaseError::fail(e));
    }
    prop_assert!(out.num_batched_tokens <= cfg.max_num_batched_tokens);
    if let Some(cap) = cfg.max_prefill_beside_decode {
        // A step carrying a decode carries at most `cap` prompt tokens.
        let is_decode = |seq: &oxllm_sched::ScheduledSeq| {
            seq.token_ids.len() == 1
                && sched
                    .request(seq.req_id)
                    .is_some_and(|r| seq.start_pos >= r.prompt().len())
        };
        if out.scheduled.iter().any(is_decode) {
            let prefill: usize = out
                .scheduled
                .iter()
                .filter(|s| s.token_ids.len() > 1)
                .map(|s| s.token_ids.len())
                .sum();
            prop_assert!(
                prefill <= cap,
                "{} prompt tokens beside a decode, cap {}",
                prefill,
                cap
            );
        }
    }
    prop_assert!(out.scheduled.len() <= cfg.max_num_seqs);
    prop_assert!(sched.num_running() <= cfg.max_num_seqs);
    let mut seen = std::collections::HashSet::new();
    let mut slots_in_step = std::collections::HashSet::new();
    for seq in &out.scheduled {
        prop_assert!(seen.insert(seq.req_id), "request scheduled twice in a step");
        prop_assert!(!seq.token_ids.is_empty());
        let covered = seq.block_table.len() * cfg.block_size;
        prop_assert!(covered >= seq.start_pos + seq.token_ids.len());
        // State and checkpoint slots written by the step are distinct. A restore may read a
        // checkpoint another sequence also restores from, or one the step overwrites (restores
        // run first).
        let written = seq.state_slot.into_iter();
        for s in written.chain(seq.checkpoints.iter().map(|c| c.slot)) {
            prop_assert!(
                slots_in_step.insert(s),
                "slot {} written twice in a step",
                s
            );
        }
        match &cfg.recurrent_states {
            None => prop_assert!(seq.state_slot.is_none() && seq.checkpoints.is_empty()),
            Some(r) => {
                prop_assert!(seq.state_slot.is_some_and(|s| (s as usize) < r.num_slots));
                if seq.restore_from.is_some() {
                    let every = r.checkpoint_interval_blocks * cfg.block_size;
                    prop_assert!(seq.start_pos > 0 && seq.start_pos % every == 0);
                }
            }
        }
    }
    for seq in &out.scheduled {
        if let Some(src) = seq.restore_from {
            let running = out.scheduled.iter().filter_map(|s| s.state_slot);
            prop_assert!(
                running.into_iter().all(|s| s != src),
                "restore from a running slot"
            );
        }
    }
    if let (Some(r), Some(slots)) = (&cfg.recurrent_states, sched.kv().state_slots()) {
        // free + used = total; each running request holds one slot; no slot shared.
        prop_assert_eq!(slots.num_free() + slots.num_used(), r.num_slots);
        prop_assert_eq!(slots.num_used(), sched.num_running());
        let held: std::collections::HashSet<u32> = sched
            .running_ids()
            .iter()
            .filter_map(|&id| sched.kv().state_slot(id))
            .collect();
        prop_assert_eq!(held.len(), sched.num_running());
        prop_assert!(sched.num_running() <= r.num_slots);
    }
    for id in &out.preempted {
        tables.remove(id);
    }
    for id in &out.finished {
        tables.remove(id);
    }
    tables.retain(|id, _| sched.request(*id).is_some());
    for &id in sched.running_ids() {
        let table = sched.kv().block_table(id);
        if let Some(prev) = tables.get(&id) {
            prop_assert!(
                table.starts_with(prev),
                "block table of {} shrank or changed",
                id
            );
        }
        tables.insert(id, table.to_vec());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn invariants_hold_and_every_request_finishes(
        cfg in config(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut sched = Scheduler::new(cfg.clone()).unwrap();
        let mut states = FakeStates::default();
        let mut tables = HashMap::new();
        let mut next_id: ReqId = 0;
        let mut live: Vec<ReqId> = Vec::new();
        for op in ops {
            match op {
                Op::Add { prefix, prefix_len, suffix, max_tokens, stop } => {
                    let tokens = make_prompt(prefix, prefix_len, &suffix);
                    let stops = if stop { vec![0] } else { Vec::new() };
                    let id = next_id;
                    next_id += 1;
                    if sched.add_request(Request::new(id, tokens, max_tokens, stops)).is_ok() {
                        live.push(id);
                    }
                }
                Op::Step => {
                    let (out, updates) = step_states(&mut sched, VOCAB, &mut states);
                    check_step(&sched, &out, &mut tables)?;
                    for u in updates {
                        prop_assert_eq!(u.new_token_ids.len(), 1);
                        if u.finish_reason.is_some() {
                            prop_assert!(sched.request(u.req_id).is_none());
                        }
                    }
                }
                Op::Abort { pick } => {
                    if !live.is_empty() {
                        let id = live[pick % live.len()];
                        let was_live = sched.request(id).is_some();
                        prop_assert_eq!(sched.abort(id), was_live);
                        prop_assert!(sched.request(id).is_none());
                    }
                }
            }
            if let Err(e) = sched.check_invariants() {
                return Err(TestCaseError::fail(e));
            }
        }
        // No more arrivals: everything finishes within a generous bound.
        let mut steps = 0;
        while sched.has_work() {
            prop_assert!(steps < 5000, "requests starve");
            let (out, _) = step_states(&mut sched, VOCAB, &mut states);
            check_step(&sched, &out, &mut tables)?;
            steps += 1;
        }
        prop_assert_eq!(sched.num_free_blocks(), cfg.num_blocks - 1);
        if let Some(r) = &cfg.recurrent_states {
            prop_assert_eq!(sched.kv().state_slots().map(|s| s.num_free()), Some(r.num_slots));
            let cp = sched.kv().checkpoint_stats().unwrap_or_default();
            prop_assert_eq!(cp.pending, 0, "a planned checkpoint was never committed");
            prop_assert!(cp.committed <= r.num_checkpoints);
        }
    }

    #[test]
    fn outputs_do_not_depend_on_pool_budget_or_caching(
        cfg in config(),
        prompts in prop::collection::vec(
            (0u8..3, 0usize..24, prop::collection::vec(0u32..VOCAB, 1..8), 1usize..12), 1..8),
    ) {
        let reference = SchedulerConfig {
            max_num_batched_tokens: 4096,
            max_prefill_beside_decode: None,
            max_num_seqs: 64,
            num_blocks: 1024,
            enable_prefix_caching: false,
            recurrent_states: None,
            ..cfg.clone()
        };
        let run = |cfg: SchedulerConfig| {
            let mut sched = Scheduler::new(cfg).unwrap();
            let mut accepted = 0;
            for (id, (prefix, prefix_len, suffix, max_tokens)) in prompts.iter().enumerate() {
                let tokens = make_prompt(*prefix, *prefix_len, suffix);
                // Rejections (too long for the pool) must agree too: compare only the accepted.
                let r = sched.add_request(Request::new(id as ReqId, tokens, *max_tokens, vec![0]));
                accepted += usize::from(r.is_ok());
            }
            (accepted, run_to_completion(&mut sched, VOCAB, 5000))
        };
        let (accepted, small): (usize, BTreeMap<ReqId, (Vec<TokenId>, FinishReason)>) = run(cfg);
        // Every accepted request finishes: no budget, cap or pool starves one.
        prop_assert_eq!(accepted, small.len());
        let (_, big) = run(reference);
        for (id, got) in &small {
            prop_assert_eq!(Some(got), big.get(id), "request {} differs", id);
        }
    }
}

#[test]
fn fake_sampler_is_deterministic() {
    assert_eq!(
        fake_next_token(&[1, 2, 3], VOCAB),
        fake_next_token(&[1, 2, 3], VOCAB)
    );
}
