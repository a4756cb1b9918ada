//! One test per scheduling behaviour.

mod common;

use common::{config, fake_next_token, prompt, req, run_to_completion, step};
use oxllm_core::FinishReason;
use oxllm_sched::{Request, RequestStatus, SchedError, Scheduler, SchedulerConfig};

const VOCAB: u32 = 1000;

#[test]
fn long_prompt_is_chunked_at_budget_16_while_a_decode_continues() {
    let mut sched = Scheduler::new(config(16, 8, 4, 64)).unwrap();
    sched.add_request(req(1, prompt(5, 1), 10)).unwrap();
    let (out, _) = step(&mut sched, VOCAB);
    assert_eq!(out.scheduled.len(), 1);
    assert!(out.scheduled[0].needs_sample);

    sched.add_request(req(2, prompt(40, 2), 3)).unwrap();
    let mut chunks = Vec::new();
    for _ in 0..3 {
        let (out, _) = step(&mut sched, VOCAB);
        assert_eq!(
            out.num_batched_tokens,
            out.scheduled.iter().map(|s| s.token_ids.len()).sum()
        );
        assert!(out.num_batched_tokens <= 16);
        // The running decode comes first and gets its one token every step.
        assert_eq!(out.scheduled[0].req_id, 1);
        assert_eq!(out.scheduled[0].token_ids.len(), 1);
        assert!(out.scheduled[0].needs_sample);
        let chunk = &out.scheduled[1];
        assert_eq!(chunk.req_id, 2);
        chunks.push((chunk.start_pos, chunk.token_ids.len(), chunk.needs_sample));
    }
    assert_eq!(
        chunks,
        vec![(0, 15, false), (15, 15, false), (30, 10, true)]
    );
    let b = sched.request(2).unwrap();
    assert_eq!(b.num_computed_tokens(), 40);
    assert_eq!(b.output().len(), 1);
}

#[test]
fn prefix_hit_computes_only_the_suffix_and_always_the_last_token() {
    let mut sched = Scheduler::new(config(64, 8, 4, 64)).unwrap();
    let shared = prompt(12, 3);
    sched.add_request(req(1, shared.clone(), 1)).unwrap();
    run_to_completion(&mut sched, VOCAB, 10);

    // 10 shared tokens + 3 new: two full cached blocks (8 tokens) are reused.
    let mut longer = shared[..10].to_vec();
    longer.extend([7, 8, 9]);
    sched.add_request(req(2, longer.clone(), 1)).unwrap();
    // The identical prompt: three blocks are cached, but only two may be used (last token).
    sched.add_request(req(3, shared.clone(), 1)).unwrap();
    let (out, _) = step(&mut sched, VOCAB);
    let b = &out.scheduled[0];
    assert_eq!((b.start_pos, b.token_ids.as_slice()), (8, &longer[8..]));
    let c = &out.scheduled[1];
    assert_eq!((c.start_pos, c.token_ids.as_slice()), (8, &shared[8..]));
    assert!(b.needs_sample && c.needs_sample);
    assert_eq!(
        &b.block_table[..2],
        &c.block_table[..2],
        "prefix blocks are shared"
    );
    let stats = sched.prefix_cache_stats();
    assert_eq!(stats.num_queried_tokens, 12 + 13 + 12);
    assert_eq!(stats.num_hit_tokens, 16);
}

#[test]
fn prefix_hit_gives_the_same_output_as_a_cold_run() {
    let run = |caching: bool| {
        let mut cfg = config(64, 8, 4, 64);
        cfg.enable_prefix_caching = caching;
        let mut sched = Scheduler::new(cfg).unwrap();
        sched.add_request(req(1, prompt(30, 5), 6)).unwrap();
        let first = run_to_completion(&mut sched, VOCAB, 50);
        sched.add_request(req(2, prompt(30, 5), 6)).unwrap();
        let second = run_to_completion(&mut sched, VOCAB, 50);
        (
            first[&1].clone(),
            second[&2].clone(),
            sched.prefix_cache_stats().num_hit_tokens,
        )
    };
    let (cold1, cold2, cold_hits) = run(false);
    let (warm1, warm2, warm_hits) = run(true);
    assert_eq!(cold_hits, 0);
    // Prompt and generated blocks were cached: 35 known tokens -> 8 full blocks, capped at 34.
    assert_eq!(warm_hits, 28);
    assert_eq!(cold1, warm1);
    assert_eq!(cold2, warm2);
    assert_eq!(warm1.0, warm2.0);
}

#[test]
fn newest_request_is_preempted_and_recomputed_to_the_same_output() {
    let workload = |sched: &mut Scheduler| {
        sched.add_request(req(1, prompt(6, 1), 12)).unwrap();
        sched.add_request(req(2, prompt(6, 2), 12)).unwrap();
    };
    let mut big = Scheduler::new(config(64, 8, 2, 64)).unwrap();
    workload(&mut big);
    let expected = run_to_completion(&mut big, VOCAB, 100);

    // 9 usable blocks of 2 tokens: each request needs up to 9 blocks (17 tokens).
    let mut cfg = config(64, 8, 2, 10);
    cfg.enable_prefix_caching = false;
    let mut small = Scheduler::new(cfg).unwrap();
    workload(&mut small);
    let mut preempted_at = None;
    let mut recompute = None;
    let mut outputs = std::collections::BTreeMap::new();
    for step_no in 0..200 {
        if !small.has_work() {
            break;
        }
        let (out, updates) = step(&mut small, VOCAB);
        if !out.preempted.is_empty() && preempted_at.is_none() {
            assert_eq!(out.preempted, vec![2], "the newest request is the victim");
            assert!(out.scheduled.iter().all(|s| s.req_id == 1));
            assert_eq!(small.request(2).unwrap().status(), RequestStatus::Preempted);
            assert_eq!(small.request(2).unwrap().num_computed_tokens(), 0);
            preempted_at = Some(step_no);
        }
        if preempted_at.is_some() && recompute.is_none() {
            if let Some(s) = out.scheduled.iter().find(|s| s.req_id == 2) {
                recompute = Some((s.start_pos, s.token_ids.len()));
            }
        }
        for u in updates {
            outputs
                .entry(u.req_id)
                .or_insert_with(Vec::new)
                .extend(u.new_token_ids);
        }
    }
    assert!(
        preempted_at.is_some(),
        "the small pool must force a preemption"
    );
    let (start, len) = recompute.expect("the victim runs again");
    assert_eq!(start, 0, "recompute starts from scratch");
    assert!(len > 6, "recompute covers prompt and output so far");
    assert_eq!(outputs[&1], expected[&1].0);
    assert_eq!(outputs[&2], expected[&2].0);
    assert_eq!(outputs[&2].len(), 12);
    assert_eq!(small.num_free_blocks(), 9);
}

#[test]
fn impossible_requests_are_rejected_at_submission() {
    let mut cfg = config(16, 4, 4, 5);
    cfg.max_model_len = 32;
    let mut sched = Scheduler::new(cfg).unwrap();
    assert_eq!(
        sched.add_request(req(1, vec![], 4)),
        Err(SchedError::EmptyPrompt(1))
    );
    assert_eq!(
        sched.add_request(req(1, prompt(3, 0), 0)),
        Err(SchedError::ZeroMaxTokens(1))
    );
    assert!(matches!(
        sched.add_request(req(1, prompt(30, 0), 3)),
        Err(SchedError::ExceedsMaxModelLen { .. })
    ));
    // 4 usable blocks of 4 = 16 slots; 10 + 7 tokens need 16 slots (last one never computed).
    assert!(sched.add_request(req(1, prompt(10, 0), 7)).is_ok());
    assert_eq!(
        sched.add_request(req(2, prompt(10, 0), 8)),
        Err(SchedError::ExceedsKvCache {
            req_id: 2,
            needed: 17,
            capacity: 16
        })
    );
    assert_eq!(
        sched.add_request(req(1, prompt(3, 0), 1)),
        Err(SchedError::DuplicateRequest(1))
    );
    assert_eq!(sched.num_waiting(), 1);
    let err = Scheduler::new(SchedulerConfig {
        block_size: 0,
        ..SchedulerConfig::default()
    });
    assert!(matches!(err, Err(SchedError::InvalidConfig(_))));
}

#[test]
fn abort_frees_blocks_at_once_and_is_reported() {
    let mut sched = Scheduler::new(config(64, 8, 4, 16)).unwrap();
    sched.add_request(req(1, prompt(20, 0), 10)).unwrap();
    sched.add_request(req(2, prompt(5, 1), 10)).unwrap();
    step(&mut sched, VOCAB);
    assert!(sched.num_free_blocks() < 15);
    assert!(sched.abort(1));
    assert!(!sched.abort(1));
    assert!(!sched.abort(99));
    assert_eq!(sched.num_free_blocks(), 15 - 2);
    let (out, _) = step(&mut sched, VOCAB);
    assert_eq!(out.finished, vec![1]);

    // Aborted while the step is in flight: its sample is ignored.
    let out = sched.schedule().unwrap();
    assert!(sched.abort(2));
    assert_eq!(sched.num_free_blocks(), 15);
    let updates = sched.update_from_output(&out, &[(2, 5)]).unwrap();
    assert!(updates.is_empty());
    assert!(!sched.has_work());
}

#[test]
fn max_num_seqs_caps_running_requests_and_admission_is_fifo() {
    let mut sched = Scheduler::new(config(256, 2, 4, 64)).unwrap();
    for id in 0..5 {
        sched.add_request(req(id, prompt(4, id as u32), 3)).unwrap();
    }
    let (out, _) = step(&mut sched, VOCAB);
    assert_eq!(
        out.scheduled.iter().map(|s| s.req_id).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(sched.num_running(), 2);
    let mut admitted = vec![0, 1];
    for _ in 0..30 {
        if !sched.has_work() {
            break;
        }
        let (out, _) = step(&mut sched, VOCAB);
        assert!(sched.num_running() <= 2);
        for s in out.scheduled.iter().filter(|s| s.start_pos == 0) {
            admitted.push(s.req_id);
        }
    }
    assert_eq!(admitted, vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_blocked_request_is_not_overtaken() {
    // 5 usable blocks of 4 tokens.
    let mut sched = Scheduler::new(config(64, 8, 4, 6)).unwrap();
    sched.add_request(req(1, prompt(12, 0), 4)).unwrap();
    step(&mut sched, VOCAB);
    sched.add_request(req(2, prompt(12, 1), 2)).unwrap();
    sched.add_request(req(3, prompt(2, 2), 2)).unwrap();
    let (out, _) = step(&mut sched, VOCAB);
    // Request 1 now holds 4 blocks; 2 needs 3 and waits; 3 would fit but must not overtake.
    assert_eq!(
        out.scheduled.iter().map(|s| s.req_id).collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(sched.waiting_ids().collect::<Vec<_>>(), vec![2, 3]);
    let done = run_to_completion(&mut sched, VOCAB, 50);
    assert_eq!(done.len(), 3);
}

#[test]
fn stop_tokens_max_tokens_and_finish_with() {
    let mut sched = Scheduler::new(config(64, 8, 4, 32)).unwrap();
    let p = prompt(5, 0);
    let first = fake_next_token(&p, VOCAB);
    sched
        .add_request(Request::new(1, p.clone(), 10, vec![first]))
        .unwrap();
    sched.add_request(req(2, p.clone(), 3)).unwrap();
    sched.add_request(req(3, prompt(5, 9), 10)).unwrap();
    let (_, updates) = step(&mut sched, VOCAB);
    let u1 = updates.iter().find(|u| u.req_id == 1).unwrap();
    assert_eq!(
        (u1.new_token_ids.clone(), u1.finish_reason),
        (vec![first], Some(FinishReason::Stop))
    );
    assert!(sched.finish_with(3, FinishReason::Stop));
    let done = run_to_completion(&mut sched, VOCAB, 20);
    assert_eq!(done[&2].1, FinishReason::Length);
    assert_eq!(done[&2].0.len(), 2, "one token came in the first step");
    assert_eq!(sched.num_free_blocks(), 31);
}

#[test]
fn step_protocol_misuse_is_an_error_without_effect() {
    let mut cfg = config(64, 8, 4, 32);
    cfg.max_num_batched_tokens = 20;
    let mut sched_small = Scheduler::new(cfg).unwrap();
    sched_small.add_request(req(1, prompt(5, 0), 4)).unwrap();
    sched_small.add_request(req(2, prompt(40, 0), 4)).unwrap();
    let out = sched_small.schedule().unwrap();
    assert_eq!(sched_small.schedule(), Err(SchedError::StepInFlight));
    assert_eq!(
        sched_small.update_from_output(&out, &[]),
        Err(SchedError::MissingSample(1))
    );
    assert_eq!(
        sched_small.update_from_output(&out, &[(1, 3), (2, 4)]),
        Err(SchedError::UnexpectedSample(2))
    );
    let mut stale = out.clone();
    stale.step += 1;
    assert!(matches!(
        sched_small.update_from_output(&stale, &[(1, 3)]),
        Err(SchedError::WrongStep { .. })
    ));
    assert_eq!(sched_small.request(1).unwrap().num_computed_tokens(), 0);
    let updates = sched_small.update_from_output(&out, &[(1, 3)]).unwrap();
    assert_eq!(updates.len(), 1);
    assert_eq!(sched_small.request(2).unwrap().num_computed_tokens(), 15);
}

#[test]
fn batch_arrays_match_the_runner_layout() {
    let mut sched = Scheduler::new(config(8, 8, 4, 32)).unwrap();
    sched.add_request(req(1, prompt(3, 0), 4)).unwrap();
    step(&mut sched, VOCAB);
    sched.add_request(req(2, prompt(10, 1), 4)).unwrap();
    let out = sched.schedule().unwrap();
    let a = out.to_batch_arrays(4).unwrap();
    let t1 = &out.scheduled[0].block_table;
    let t2 = &out.scheduled[1].block_table;
    // Request 1 decodes position 3; request 2 computes positions 0..7 (budget 8).
    assert_eq!(a.positions, vec![3, 0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(a.query_start_loc, vec![0, 1, 8]);
    assert_eq!(a.seq_lens, vec![4, 7]);
    assert_eq!(a.slot_mapping[0], (t1[0] * 4 + 3) as i32);
    assert_eq!(a.slot_mapping[5], (t2[1] * 4) as i32);
    assert_eq!(a.block_table_stride, 2);
    assert_eq!(a.block_tables, vec![t1[0], 0, t2[0], t2[1]]);
    assert_eq!(a.logits_indices, vec![0]);
    assert_eq!(a.sample_req_ids, vec![1]);
}

#[test]
fn hybrid_prompts_sharing_one_checkpoint_interval_hit_and_restore() {
    use common::{step_states, FakeStates};
    use oxllm_sched::RecurrentStateConfig;
    // 4-token blocks, a checkpoint every 2 blocks (8 tokens), 2 running slots.
    let mut cfg = config(64, 8, 4, 64);
    cfg.recurrent_states = Some(RecurrentStateConfig {
        num_slots: 2,
        num_checkpoints: 4,
        checkpoint_interval_blocks: 2,
    });
    let mut sched = Scheduler::new(cfg).unwrap();
    let mut states = FakeStates::default();
    let shared = prompt(8, 1);
    let mut a = shared.clone();
    a.extend_from_slice(&prompt(5, 2));
    let mut b = shared.clone();
    b.extend_from_slice(&prompt(6, 3));
    sched.add_request(req(1, a, 6)).unwrap();
    let (out, _) = step_states(&mut sched, VOCAB, &mut states);
    assert_eq!(out.scheduled[0].checkpoints.len(), 1);
    assert_eq!(out.scheduled[0].checkpoints[0].num_tokens, 8);
    assert_eq!(out.scheduled[0].restore_from, None);
    sched.add_request(req(2, b, 6)).unwrap();
    let (out, _) = step_states(&mut sched, VOCAB, &mut states);
    let seq_b = out.scheduled.iter().find(|s| s.req_id == 2).unwrap();
    assert_eq!(
        seq_b.start_pos, 8,
        "exactly one checkpoint interval is reused"
    );
    assert!(seq_b.restore_from.is_some());
    assert_ne!(seq_b.state_slot, out.scheduled[0].state_slot);
    assert_eq!(sched.prefix_cache_stats().num_hit_tokens, 8);
    // Both running: a third request waits for a state slot although blocks are plentiful.
    sched.add_request(req(3, prompt(3, 4), 2)).unwrap();
    let (out, _) = step_states(&mut sched, VOCAB, &mut states);
    assert!(out.scheduled.iter().all(|s| s.req_id != 3));
    assert_eq!(sched.num_waiting(), 1);
    let mut steps = 0;
    while sched.has_work() {
        step_states(&mut sched, VOCAB, &mut states);
        steps += 1;
        assert!(steps < 50);
    }
}
