//! The dense (Llama-family) and hybrid (`hybrid`) forwards as ops on a runtime [`Backend`](oxllm_runtime::Backend).
//!
//! [`record_dense_forward`] launches one step's ops over step-input buffers ([`StepView`]) and
//! the paged K/V buffers ([`KvBuffers`]). On an eager step the ops run as they are launched;
//! inside a capture they are recorded, and the plan replays them after the inputs are
//! rewritten. Either way every op reads its shape-dependent data (token ids, positions, slots,
//! block tables, sequence lengths, logits indices) from buffers, never from the host, and rows
//! beyond the step's real tokens (bucket padding: slot -1, no sequence) are skipped by the K/V
//! store and zeroed by attention, so they cannot touch real rows or the cache.

mod buffers;
mod dense;
mod forward;
mod hybrid;
mod moe_work;
mod states;
mod weights;

pub use buffers::{KvBuffers, StepBuffers, StepView};
pub use dense::record_dense_forward;
pub use forward::record_forward;
pub use hybrid::record_hybrid_forward;
pub use states::{StateBuffers, NO_ENTRY};
