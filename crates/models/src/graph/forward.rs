//! The one forward of every model: the dense or the hybrid recorder, chosen by the model kind.

use oxllm_runtime::{Backend, BufRef};

use super::{record_dense_forward, record_hybrid_forward, KvBuffers, StateBuffers, StepView};
use crate::{Model, ModelError, ModelKind};

/// Launches one forward step of `model` on `b` and returns the step-local logits buffer,
/// `[step.logits(), vocab]`. Hybrid models need `states` (their recurrent-state buffers and
/// state inputs); dense models ignore it.
pub fn record_forward(
    b: &mut dyn Backend,
    model: &Model,
    step: &StepView,
    kv: &KvBuffers,
    states: Option<&StateBuffers>,
) -> Result<BufRef, ModelError> {
    match (&model.kind, states) {
        (ModelKind::Dense(m), _) => record_dense_forward(b, m, step, kv),
        (ModelKind::Hybrid(m), Some(states)) => record_hybrid_forward(b, m, step, kv, states),
        (ModelKind::Hybrid(_), None) => Err(ModelError::InvalidBatch(
            "a hybrid model's step needs its recurrent-state buffers".into(),
        )),
    }
}
