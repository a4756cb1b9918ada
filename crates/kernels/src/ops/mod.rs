//! Elementwise and row-wise tensor ops of a transformer forward pass, on plain `f32` slices laid
//! out row-major. Each op has one obvious scalar implementation; the compiler vectorises the
//! inner loops, and the hot products live in `matmul` and `attention`.

mod activation;
mod norm;
mod qk_rope;
mod rope;
mod route;
mod softmax;
pub mod vexp;

pub use activation::{add_in_place, silu, silu_mul_in_place, silu_mul_scalar};
pub use norm::{rms_norm, rms_norm_rows_in_place};
pub use qk_rope::qk_norm_rope;
pub use rope::{Rope, RopeLayout};
pub use route::{route, route_into};
pub use softmax::{softmax_in_place, softmax_scalar, softmax_vexp};
