//! Applying a constrained row's token mask to SmolLM2's 49152 logits, for masks shaped like a
//! JSON grammar's: one allowed token (a structural position) and all but one token in 32
//! (inside free text). `bit_per_logit` is the definition, a test per logit, as the peer.
//! Run: `cargo bench -p oxllm-sample --bench mask`.

use criterion::{criterion_group, criterion_main, Criterion};
use oxllm_sample::sample_rows::{apply_token_mask, mask_words};
use std::hint::black_box;
use std::time::Duration;

const VOCAB: usize = 49152;

fn bit_per_logit(logits: &mut [f32], mask: &[u32]) {
    for (t, logit) in logits.iter_mut().enumerate() {
        if mask[t / 32] & (1 << (t % 32)) == 0 {
            *logit = f32::NEG_INFINITY;
        }
    }
}

fn bench(c: &mut Criterion) {
    let logits: Vec<f32> = (0..VOCAB)
        .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 0.02)
        .collect();
    let mut one = vec![0u32; mask_words(VOCAB)];
    one[1234 / 32] |= 1 << (1234 % 32);
    let text: Vec<u32> = (0..mask_words(VOCAB))
        .map(|w| !(1u32 << (w % 32)))
        .collect();
    let mut g = c.benchmark_group("mask_49152");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    let mut row = logits.clone();
    for (name, mask) in [("one_token", &one), ("text", &text)] {
        g.bench_function(format!("{name}/by_word"), |b| {
            b.iter(|| {
                row.copy_from_slice(&logits);
                apply_token_mask(black_box(&mut row), black_box(mask));
            })
        });
        g.bench_function(format!("{name}/bit_per_logit"), |b| {
            b.iter(|| {
                row.copy_from_slice(&logits);
                bit_per_logit(black_box(&mut row), black_box(mask));
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
