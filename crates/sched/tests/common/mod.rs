//! Test driver: runs steps with a deterministic fake sampler.

#![allow(dead_code)]

use std::collections::HashMap;

use oxllm_core::{ReqId, TokenId};
use oxllm_sched::{Request, RequestUpdate, Scheduler, SchedulerConfig, SchedulerOutput};

const FNV_BASIS: u64 = 1469598103934665603;

fn absorb(h: u64, t: TokenId) -> u64 {
    (h ^ u64::from(t)).wrapping_mul(1099511628211)
}

/// A "model" whose next token depends only on the request's tokens so far, so a request's output
/// is the same whatever else runs, however it is chunked or recomputed.
pub fn fake_next_token(tokens: &[TokenId], vocab: u32) -> TokenId {
    (fnv(tokens) % u64::from(vocab)) as TokenId
}

fn fnv(tokens: &[TokenId]) -> u64 {
    tokens.iter().fold(FNV_BASIS, |h, &t| absorb(h, t))
}

/// A fake recurrent-state pool: each slot holds a running hash of the tokens its sequence has
/// absorbed, handled exactly as the model handles real states (restores before the step, reset
/// at position 0, checkpoints copied after their row). A missing reset, a wrong restore, a slot
/// shared by two sequences or a misplaced checkpoint makes a state differ from the hash of the
/// sequence's tokens.
#[derive(Default)]
pub struct FakeStates {
    slots: HashMap<u32, u64>,
}

impl FakeStates {
    /// Runs the step's state updates; returns each stateful sequence's state after the step.
    pub fn apply(&mut self, out: &SchedulerOutput) -> HashMap<ReqId, u64> {
        for seq in &out.scheduled {
            if let (Some(src), Some(dst)) = (seq.restore_from, seq.state_slot) {
                let v = *self
                    .slots
                    .get(&src)
                    .expect("restore from an unwritten checkpoint");
                self.slots.insert(dst, v);
            }
        }
        let mut after = HashMap::new();
        for seq in &out.scheduled {
            let Some(slot) = seq.state_slot else {
                assert!(seq.restore_from.is_none() && seq.checkpoints.is_empty());
                continue;
            };
            let mut h = if seq.start_pos == 0 {
                FNV_BASIS
            } else {
                *self
                    .slots
                    .get(&slot)
                    .expect("continuing from an unwritten slot")
            };
            for (i, &t) in seq.token_ids.iter().enumerate() {
                h = absorb(h, t);
                for c in &seq.checkpoints {
                    if c.num_tokens == seq.start_pos + i + 1 {
                        assert_ne!(c.slot, slot, "checkpoint into the running slot");
                        self.slots.insert(c.slot, h);
                    }
                }
            }
            self.slots.insert(slot, h);
            after.insert(seq.req_id, h);
        }
        after
    }
}

/// One schedule + fake forward + update. Asserts the step-level invariants.
pub fn step(sched: &mut Scheduler, vocab: u32) -> (SchedulerOutput, Vec<RequestUpdate>) {
    assert!(!sched.kv().has_recurrent_states(), "use step_states");
    step_states(sched, vocab, &mut FakeStates::default())
}

/// [`step`] for schedulers of hybrid models: `states` carries the fake recurrent states across
/// steps, and every stateful sequence's state must equal the hash of its tokens so far.
pub fn step_states(
    sched: &mut Scheduler,
    vocab: u32,
    states: &mut FakeStates,
) -> (SchedulerOutput, Vec<RequestUpdate>) {
    let out = sched.schedule().expect("no step in flight");
    let after = states.apply(&out);
    let arrays = out
        .to_batch_arrays(sched.config().block_size)
        .expect("scheduler output flattens");
    assert_eq!(arrays.token_ids.len(), out.num_batched_tokens);
    assert!(out.num_batched_tokens <= sched.config().max_num_batched_tokens);
    assert!(sched.num_running() <= sched.config().max_num_seqs);
    // Sample from what the step actually computed (the rows up to the scheduled end), as a
    // model would, so a wrong `needs_sample` or a wrong chunk shows up in the outputs.
    let mut sampled: Vec<(ReqId, TokenId)> = Vec::new();
    for seq in &out.scheduled {
        let req = sched
            .request(seq.req_id)
            .expect("scheduled request is live");
        let end = seq.start_pos + seq.token_ids.len();
        assert_eq!(&req.all_tokens()[seq.start_pos..end], &seq.token_ids[..]);
        assert_eq!(
            seq.needs_sample,
            end == req.num_tokens(),
            "needs_sample of {}",
            seq.req_id
        );
        if let Some(&h) = after.get(&seq.req_id) {
            assert_eq!(
                h,
                fnv(&req.all_tokens()[..end]),
                "recurrent state of {} after {end} tokens",
                seq.req_id
            );
        }
        if seq.needs_sample {
            sampled.push((seq.req_id, fake_next_token(&req.all_tokens()[..end], vocab)));
        }
    }
    assert_eq!(
        sampled.iter().map(|s| s.0).collect::<Vec<_>>(),
        arrays.sample_req_ids
    );
    let updates = sched
        .update_from_output(&out, &sampled)
        .expect("samples match the step");
    (out, updates)
}

pub fn config(
    budget: usize,
    max_seqs: usize,
    block_size: usize,
    num_blocks: usize,
) -> SchedulerConfig {
    SchedulerConfig {
        max_num_batched_tokens: budget,
        max_prefill_beside_decode: None,
        max_num_seqs: max_seqs,
        block_size,
        num_blocks,
        max_model_len: 1024,
        enable_prefix_caching: true,
        recurrent_states: None,
    }
}

pub fn prompt(len: usize, salt: u32) -> Vec<TokenId> {
    (0..len as u32)
        .map(|i| 100 + (i * 13 + salt * 7) % 50)
        .collect()
}

pub fn req(id: ReqId, prompt: Vec<TokenId>, max_tokens: usize) -> Request {
    Request::new(id, prompt, max_tokens, Vec::new())
}

/// Runs until no work is left (or `max_steps`), collecting every request's output and finish.
pub fn run_to_completion(
    sched: &mut Scheduler,
    vocab: u32,
    max_steps: usize,
) -> std::collections::BTreeMap<ReqId, (Vec<TokenId>, oxllm_core::FinishReason)> {
    let mut outputs: std::collections::BTreeMap<ReqId, Vec<TokenId>> = Default::default();
    let mut done = std::collections::BTreeMap::new();
    let mut states = FakeStates::default();
    for _ in 0..max_steps {
        if !sched.has_work() {
            break;
        }
        let (_, updates) = step_states(sched, vocab, &mut states);
        for u in updates {
            outputs
                .entry(u.req_id)
                .or_default()
                .extend(&u.new_token_ids);
            if let Some(reason) = u.finish_reason {
                done.insert(
                    u.req_id,
                    (outputs.remove(&u.req_id).unwrap_or_default(), reason),
                );
            }
        }
    }
    assert!(!sched.has_work(), "requests left after {max_steps} steps");
    done
}
