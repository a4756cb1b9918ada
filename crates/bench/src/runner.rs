//! Driving one run: a closed loop (`concurrency` workers, each sending its next request as soon
//! as its previous one ends) or an open loop (Poisson arrivals at `rate` requests/s, optionally
//! capped at `concurrency` in flight). Every prompt yields exactly one outcome: a request that
//! fails or times out is recorded as failed, never dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Semaphore};

use crate::client::{run_request, ClientConfig, Outcome};
use crate::progress::Progress;
use crate::workload::{Prompt, SplitMix64};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    Closed {
        concurrency: usize,
    },
    Poisson {
        rate: f64,
        max_concurrency: Option<usize>,
        seed: u64,
    },
}

/// Sends all prompts under `load`; returns one outcome per prompt, in prompt order.
pub async fn run(
    cfg: &ClientConfig,
    prompts: &[Prompt],
    load: Load,
    progress: &mut Progress,
) -> Vec<Outcome> {
    let cfg = Arc::new(cfg.clone());
    let prompts: Arc<Vec<Prompt>> = Arc::new(prompts.to_vec());
    let run_start = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel::<Outcome>();
    match load {
        Load::Closed { concurrency } => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..concurrency.max(1).min(prompts.len().max(1)) {
                let (cfg, prompts, next, tx) =
                    (cfg.clone(), prompts.clone(), next.clone(), tx.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(p) = prompts.get(i) else { break };
                        let o = run_request(&cfg, p, run_start).await;
                        if tx.send(o).is_err() {
                            break;
                        }
                    }
                });
            }
        }
        Load::Poisson {
            rate,
            max_concurrency,
            seed,
        } => {
            let sem = Arc::new(Semaphore::new(
                max_concurrency.unwrap_or(Semaphore::MAX_PERMITS).max(1),
            ));
            let (cfg, prompts, tx) = (cfg.clone(), prompts.clone(), tx.clone());
            tokio::spawn(async move {
                let mut rng = SplitMix64::new(seed ^ 0x5eed_a771_7a15);
                let mut due = Duration::ZERO;
                for i in 0..prompts.len() {
                    if i > 0 && rate.is_finite() && rate > 0.0 {
                        // Exponential inter-arrival gap with mean 1/rate.
                        let gap = -(1.0 - rng.next_f64()).ln() / rate;
                        due += Duration::from_secs_f64(gap);
                        tokio::time::sleep_until((run_start + due).into()).await;
                    }
                    let Ok(permit) = sem.clone().acquire_owned().await else {
                        break;
                    };
                    let (cfg, prompts, tx) = (cfg.clone(), prompts.clone(), tx.clone());
                    tokio::spawn(async move {
                        let o = run_request(&cfg, &prompts[i], run_start).await;
                        drop(permit);
                        let _ = tx.send(o);
                    });
                }
            });
        }
    }
    drop(tx);
    let mut outcomes = Vec::with_capacity(prompts.len());
    while let Some(o) = rx.recv().await {
        progress.tick(o.ok());
        outcomes.push(o);
    }
    progress.finish();
    outcomes.sort_by_key(|o| o.index);
    outcomes
}
