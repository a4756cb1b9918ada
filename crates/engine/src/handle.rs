//! Starting the engine thread and the client handle that talks to it.
//!
//! The handle is cheap to clone and `Send`; it validates what it can without the engine
//! (prompt length against the context and the KV pool, sampling parameters) so a request that
//! can never run is rejected at submission with a clear error, not after queueing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use oxllm_core::ReqId;
use oxllm_models::Model;
use oxllm_sched::{RecurrentStateConfig, Scheduler, SchedulerConfig};
use oxllm_tok::Tokenizer;
use tokio::sync::mpsc::unbounded_channel;

use crate::buckets::PlanReport;
use crate::config::{kv_bytes_per_token, KvDtype};
use crate::core::{EngineCore, EngineStats};
use crate::kv_events::{KvEventBatch, KvEventPublisher, KvEventReceiver};
use crate::runner::{ModelRunner, RunnerConfig};
use crate::{
    plan_states, ContextBound, EngineConfig, EngineError, GenerationRequest, RequestEvent,
    RequestStream, StatePlan,
};

/// One request of a submission: its id, the request, and where its events go.
type Submission = (
    ReqId,
    GenerationRequest,
    tokio::sync::mpsc::UnboundedSender<RequestEvent>,
);

enum Command {
    /// Requests submitted together: the engine admits them before its next step, and the
    /// scheduler counts them as one group (its fairness unit).
    Submit(Vec<Submission>),
    Abort(ReqId),
    /// Record KV-cache events from now on, starting with a snapshot (a subscriber arrived).
    EnableKvEvents,
    Shutdown,
}

/// What the engine resolved at start-up.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineInfo {
    pub num_blocks: usize,
    pub block_size: usize,
    pub max_model_len: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub vocab_size: usize,
    /// Bytes of the whole cache: K/V blocks plus the recurrent-state pool.
    pub kv_bytes: usize,
    /// The K/V cache's element type, resolved for the model.
    pub kv_dtype: KvDtype,
    /// What was captured at start-up (empty when plans are off or unavailable).
    pub plans: PlanReport,
    /// Hybrid models: the recurrent-state pool (running slots, checkpoints).
    pub states: Option<StatePlan>,
}

impl EngineInfo {
    /// Start-up lines about the recurrent-state pool (empty for attention-only models),
    /// including whether it bounds concurrency below `max_num_seqs`.
    pub fn state_summary(&self) -> Vec<String> {
        self.states
            .map(|s| s.describe(self.max_num_seqs))
            .unwrap_or_default()
    }

    /// Longest prompt + completion one request can have, and what sets it: the model's context
    /// or, when smaller, the whole KV cache (all blocks but the null block).
    pub fn context_limit(&self) -> (usize, ContextBound) {
        let pool_tokens = self.num_blocks.saturating_sub(1) * self.block_size;
        if pool_tokens < self.max_model_len {
            (pool_tokens, ContextBound::KvCache)
        } else {
            (self.max_model_len, ContextBound::ModelContext)
        }
    }
}

#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    next_id: Arc<AtomicU64>,
    stats: Arc<Mutex<EngineStats>>,
    info: EngineInfo,
    kv_events: tokio::sync::broadcast::Sender<Arc<KvEventBatch>>,
}

/// Owns the engine thread; dropping it stops the thread after in-flight work is abandoned.
pub struct Engine {
    handle: EngineHandle,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    pub fn start(
        model: Model,
        tokenizer: Option<Tokenizer>,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        let mc = model.config.clone();
        let states = plan_states(&config, model.state_bytes_per_seq());
        let kv_dtype = config.resolve_kv_dtype(&model);
        let num_blocks =
            config.resolve_num_blocks(&mc, states.map_or(0, |s| s.total_bytes()), kv_dtype);
        let max_model_len = config.resolve_max_model_len(&mc);
        if config.threads == 0 {
            return Err(EngineError::Config("threads must be at least 1".into()));
        }
        let sched_config = SchedulerConfig {
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_prefill_beside_decode: config.max_prefill_beside_decode,
            max_num_seqs: config.max_num_seqs,
            block_size: config.block_size,
            num_blocks,
            max_model_len,
            // Hybrids hit only at boundaries with a recurrent-state checkpoint.
            enable_prefix_caching: config.enable_prefix_caching,
            recurrent_states: states.map(|s| RecurrentStateConfig {
                num_slots: s.num_slots,
                num_checkpoints: s.num_checkpoints,
                checkpoint_interval_blocks: config.state_checkpoint_interval.max(1),
            }),
        };
        let scheduler = Scheduler::new(sched_config)?;
        let info = EngineInfo {
            plans: PlanReport::default(),
            num_blocks,
            block_size: config.block_size,
            max_model_len,
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            vocab_size: mc.vocab_size,
            kv_bytes: num_blocks * config.block_size * kv_bytes_per_token(&mc, kv_dtype)
                + states.map_or(0, |s| s.total_bytes()),
            kv_dtype,
            states,
        };
        let runner = ModelRunner::new(
            model,
            RunnerConfig {
                num_blocks,
                block_size: config.block_size,
                threads: config.threads,
                max_seqs: config.max_num_seqs,
                state_slots: states.map_or(0, |s| s.pool_slots()),
                max_tokens: config.max_num_batched_tokens,
                max_model_len,
                plan: config.plan,
                backend: config.backend,
                cpu: config.cpu,
                kv_dtype,
            },
        )?;
        let info = EngineInfo {
            plans: runner.plan_report().clone(),
            ..info
        };
        let stats = Arc::new(Mutex::new(EngineStats::default()));
        let (tx, rx) = mpsc::channel();
        let thread_stats = Arc::clone(&stats);
        let overlap_masks = config.overlap_masks;
        let mut kv_events = KvEventPublisher::new();
        let kv_events_tx = kv_events.sender();
        let thread = std::thread::Builder::new()
            .name("oxllm-engine".into())
            .spawn(move || {
                let mut core = EngineCore::new(
                    tokenizer.as_ref(),
                    scheduler,
                    runner,
                    num_blocks,
                    thread_stats,
                );
                core.set_overlap_masks(overlap_masks);
                engine_loop(&mut core, &rx, &mut kv_events);
            })
            .map_err(|e| EngineError::Config(format!("cannot spawn the engine thread: {e}")))?;
        Ok(Engine {
            handle: EngineHandle {
                tx,
                next_id: Arc::new(AtomicU64::new(1)),
                stats,
                info,
                kv_events: kv_events_tx,
            },
            thread: Some(thread),
        })
    }

    pub fn handle(&self) -> EngineHandle {
        self.handle.clone()
    }

    /// Stops the engine thread and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.handle.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

fn engine_loop(
    core: &mut EngineCore<'_>,
    rx: &Receiver<Command>,
    kv_events: &mut KvEventPublisher,
) {
    loop {
        // Block only when idle; otherwise take whatever arrived and step.
        if !core.has_work() {
            match rx.recv() {
                Ok(cmd) => {
                    if !apply(core, cmd) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => {
                    if !apply(core, cmd) {
                        return;
                    }
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    if !core.has_work() {
                        return;
                    }
                    break;
                }
            }
        }
        core.reap_disconnected();
        if core.has_work() {
            core.step();
        }
        kv_events.publish(core.take_kv_events());
    }
}

/// Applies one command; false means shut down.
fn apply(core: &mut EngineCore<'_>, cmd: Command) -> bool {
    match cmd {
        Command::Submit(group) => {
            let group_id = group.first().map_or(0, |(id, _, _)| *id);
            for (id, req, tx) in group {
                core.add(id, group_id, req, tx);
            }
        }
        Command::Abort(id) => core.abort(id),
        Command::EnableKvEvents => core.enable_kv_events(),
        Command::Shutdown => return false,
    }
    true
}

impl EngineHandle {
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    pub fn stats(&self) -> EngineStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Validates and submits a request; its events arrive on the returned stream.
    pub fn submit(&self, req: GenerationRequest) -> Result<RequestStream, EngineError> {
        self.submit_all(vec![req])?
            .pop()
            .ok_or(EngineError::Stopped)
    }

    /// Validates every request, then submits them as one group (all or none): the engine
    /// admits them before its next step, so they share their first step when the budget
    /// allows, and the scheduler shares running slots fairly between groups (the choices of
    /// one API request are one group). Streams come back in the requests' order.
    pub fn submit_all(
        &self,
        reqs: Vec<GenerationRequest>,
    ) -> Result<Vec<RequestStream>, EngineError> {
        for req in &reqs {
            self.validate(req)?;
        }
        let mut group = Vec::with_capacity(reqs.len());
        let mut streams = Vec::with_capacity(reqs.len());
        for req in reqs {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = unbounded_channel();
            streams.push(RequestStream {
                id,
                prompt_tokens: req.prompt_ids.len(),
                rx,
            });
            group.push((id, req, tx));
        }
        if group.is_empty() {
            return Ok(streams);
        }
        self.tx
            .send(Command::Submit(group))
            .map_err(|_| EngineError::Stopped)?;
        Ok(streams)
    }

    /// What can be checked without the engine: sampling parameters, token ids, and the
    /// context against the model and the KV pool.
    fn validate(&self, req: &GenerationRequest) -> Result<(), EngineError> {
        req.params.validate()?;
        if req.prompt_ids.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if let Some(&token) = req
            .prompt_ids
            .iter()
            .find(|&&id| id as usize >= self.info.vocab_size)
        {
            return Err(EngineError::TokenOutOfVocabulary {
                token,
                vocab_size: self.info.vocab_size,
            });
        }
        let (limit, bound) = self.info.context_limit();
        if req.prompt_ids.len() + req.params.max_tokens > limit {
            return Err(EngineError::ContextTooLong {
                prompt_tokens: req.prompt_ids.len(),
                max_tokens: req.params.max_tokens,
                limit,
                bound,
            });
        }
        Ok(())
    }

    pub fn abort(&self, id: ReqId) {
        let _ = self.tx.send(Command::Abort(id));
    }

    /// Subscribes to the engine's KV-cache events (`kv_events`), switching their recording on
    /// for good at the first call. The receiver gets a snapshot batch of the cache, then every
    /// step's events (requests submitted later included), unless it falls more than
    /// [`crate::KV_EVENT_BUFFER`] batches behind.
    pub fn subscribe_kv_events(&self) -> KvEventReceiver {
        let rx = self.kv_events.subscribe();
        // Sent before any later submission, so the engine records before it admits them.
        let _ = self.tx.send(Command::EnableKvEvents);
        rx
    }
}
