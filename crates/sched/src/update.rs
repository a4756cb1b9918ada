//! Applying a finished step: advance computed tokens, append sampled tokens, offer newly full
//! blocks to the prefix cache, and finish requests that hit a stop token or a length limit.
//!
//! Guarantees: the output must be the step in flight and the samples must match it exactly (one
//! per live sampling request, none for others); otherwise an error is returned and nothing
//! changes. Requests aborted while the step was in flight are skipped, their samples ignored.

use std::collections::HashMap;

use oxllm_core::{FinishReason, ReqId, TokenId};

use crate::error::SchedError;
use crate::output::{RequestUpdate, ScheduledSeq, SchedulerOutput};
use crate::request::{Request, RequestStatus};
use crate::scheduler::Scheduler;

impl Scheduler {
    /// Takes back the step's output with the runner's sampled tokens (one per scheduled request
    /// whose `needs_sample` is set) and returns, per request that got a token or finished, what
    /// changed. Finished requests' blocks are freed and they are reported in the next output's
    /// `finished`.
    pub fn update_from_output(
        &mut self,
        out: &SchedulerOutput,
        sampled: &[(ReqId, TokenId)],
    ) -> Result<Vec<RequestUpdate>, SchedError> {
        if self.step_in_flight != Some(out.step) {
            return Err(SchedError::WrongStep {
                got: out.step,
                expected: self.step_in_flight,
            });
        }
        let samples = self.validate_samples(out, sampled)?;
        let mut updates = Vec::new();
        for seq in &out.scheduled {
            // The step wrote its checkpoints; keep them only if it completed for a live request.
            let live = self.is_live_seq(seq);
            for c in &seq.checkpoints {
                if live {
                    self.kv.commit_checkpoint(c.slot);
                } else {
                    self.kv.discard_checkpoint(c.slot);
                }
            }
            if !live {
                continue;
            }
            let Some(req) = self.requests.get_mut(&seq.req_id) else {
                continue;
            };
            req.num_computed_tokens += seq.token_ids.len();
            // Prompt and generated blocks alike become shareable once full and computed.
            self.kv.cache_full_blocks(
                seq.req_id,
                req.all_tokens(),
                req.num_computed_tokens,
                None,
            )?;
            let Some(&token) = samples.get(&seq.req_id) else {
                continue;
            };
            req.push_output(token);
            let finish_reason = stop_reason(req, token, self.config.max_model_len);
            updates.push(RequestUpdate {
                req_id: seq.req_id,
                new_token_ids: vec![token],
                finish_reason,
            });
            if let Some(reason) = finish_reason {
                self.finish(seq.req_id, reason);
            }
        }
        self.step_in_flight = None;
        self.debug_check();
        Ok(updates)
    }

    /// Whether `seq` still describes a live running request (not aborted, or aborted and
    /// re-submitted under the same id, while the step was in flight).
    fn is_live_seq(&self, seq: &ScheduledSeq) -> bool {
        self.requests.get(&seq.req_id).is_some_and(|req| {
            req.status == RequestStatus::Running && req.num_computed_tokens == seq.start_pos
        })
    }

    fn validate_samples(
        &self,
        out: &SchedulerOutput,
        sampled: &[(ReqId, TokenId)],
    ) -> Result<HashMap<ReqId, TokenId>, SchedError> {
        let mut samples = HashMap::with_capacity(sampled.len());
        for &(req_id, token) in sampled {
            match out.scheduled.iter().find(|seq| seq.req_id == req_id) {
                // Aborted (maybe re-submitted) while the step ran: the runner could not know.
                Some(seq) if !self.is_live_seq(seq) => continue,
                Some(seq) if seq.needs_sample => {
                    if samples.insert(req_id, token).is_some() {
                        return Err(SchedError::UnexpectedSample(req_id));
                    }
                }
                _ => return Err(SchedError::UnexpectedSample(req_id)),
            }
        }
        let missing = out.scheduled.iter().find(|seq| {
            seq.needs_sample && self.is_live_seq(seq) && !samples.contains_key(&seq.req_id)
        });
        if let Some(seq) = missing {
            return Err(SchedError::MissingSample(seq.req_id));
        }
        Ok(samples)
    }
}

/// Why `req` stops after appending `token`, if it does: a stop token first (it is kept in the
/// output, like an EOS), then the length limits.
fn stop_reason(req: &Request, token: TokenId, max_model_len: usize) -> Option<FinishReason> {
    if req.stop_token_ids().contains(&token) {
        Some(FinishReason::Stop)
    } else if req.output().len() >= req.max_tokens() || req.num_tokens() >= max_model_len {
        Some(FinishReason::Length)
    } else {
        None
    }
}
