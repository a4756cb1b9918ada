//! Sampling one row of SmolLM2's vocabulary (49152 logits): greedy, temperature 1, and
//! temperature 0.7 with top-p 0.9. Run: `cargo bench -p oxllm-sample --bench draw`.

use criterion::{criterion_group, criterion_main, Criterion};
use oxllm_sample::{Sampler, SamplingParams};
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let logits: Vec<f32> = (0..49152)
        .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 0.02)
        .collect();
    let mut g = c.benchmark_group("draw_49152");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let cases = [
        ("greedy", SamplingParams::greedy()),
        (
            "t1",
            SamplingParams {
                temperature: 1.0,
                ..SamplingParams::greedy()
            },
        ),
        (
            "t0.7_top_p0.9",
            SamplingParams {
                temperature: 0.7,
                top_p: 0.9,
                ..SamplingParams::greedy()
            },
        ),
    ];
    for (name, params) in cases {
        let mut sampler = Sampler::new(&params, 1).expect("valid parameters");
        let mut row = logits.clone();
        g.bench_function(name, |b| {
            b.iter(|| {
                row.copy_from_slice(&logits);
                sampler.sample(&mut row, &[], &[])
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
