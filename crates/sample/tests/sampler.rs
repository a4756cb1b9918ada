//! Sampler behaviour against hand-computed and reference distributions: greedy, temperature,
//! top-k, top-p, min-p, penalties, seeding and batch independence, logprobs, errors.

use oxllm_sample::{SampleError, Sampled, Sampler, SamplingParams};
use proptest::prelude::*;

fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut p = SamplingParams::default();
    f(&mut p);
    p
}

fn sampler(p: &SamplingParams, seed: u64) -> Sampler {
    match Sampler::new(p, seed) {
        Ok(s) => s,
        Err(e) => panic!("invalid params in test: {e}"),
    }
}

fn sample(s: &mut Sampler, logits: &[f32]) -> Sampled {
    let mut row = logits.to_vec();
    match s.sample(&mut row, &[], &[]) {
        Ok(x) => x,
        Err(e) => panic!("sampling failed: {e}"),
    }
}

fn softmax(logits: &[f32], t: f64) -> Vec<f64> {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits
        .iter()
        .map(|&l| ((l as f64 - max) / t).exp())
        .collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

/// Empirical token frequencies over `draws` samples.
fn frequencies(p: &SamplingParams, logits: &[f32], draws: usize, seed: u64) -> Vec<f64> {
    let mut s = sampler(p, seed);
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..draws {
        counts[sample(&mut s, logits).token as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / draws as f64).collect()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn ln(xs: &[f64]) -> Vec<f32> {
    xs.iter().map(|x| x.ln() as f32).collect()
}

#[test]
fn greedy_is_argmax_first_on_ties() {
    let mut s = sampler(&SamplingParams::greedy(), 1);
    assert_eq!(sample(&mut s, &[0.1, 3.0, -2.0, 2.9]).token, 1);
    assert_eq!(sample(&mut s, &[1.0, 5.0, 5.0, 5.0]).token, 1);
    assert_eq!(
        sample(&mut s, &[f32::NAN, -1.0, f32::NEG_INFINITY]).token,
        1
    );
    // Near-zero temperature is greedy too.
    let mut s = sampler(&params(|p| p.temperature = 1e-6), 1);
    assert_eq!(sample(&mut s, &[0.0, 0.0001, 0.0]).token, 1);
}

#[test]
fn greedy_consumes_one_draw_per_token_too() {
    let mut s = sampler(&SamplingParams::greedy(), 1);
    for i in 1..=5 {
        sample(&mut s, &[1.0, 2.0]);
        assert_eq!(s.draws(), i);
    }
}

#[test]
fn empirical_frequencies_match_softmax() {
    let logits = [0.3f32, -1.2, 2.0, 1.1, 0.0, -0.5, 1.7, -3.0, 0.9, 0.4];
    let got = frequencies(&SamplingParams::default(), &logits, 20_000, 7);
    assert!(max_abs_diff(&got, &softmax(&logits, 1.0)) < 0.02, "{got:?}");
}

#[test]
fn temperature_scales_the_distribution() {
    let logits = [0.0f32, 1.0, 2.0];
    for t in [0.5f32, 1.0, 2.0] {
        let got = frequencies(&params(|p| p.temperature = t), &logits, 20_000, 11);
        let want = softmax(&logits, t as f64);
        assert!(
            max_abs_diff(&got, &want) < 0.02,
            "t = {t}: {got:?} vs {want:?}"
        );
    }
    // Colder is peakier.
    let cold = frequencies(&params(|p| p.temperature = 0.5), &logits, 20_000, 3);
    let hot = frequencies(&params(|p| p.temperature = 2.0), &logits, 20_000, 3);
    assert!(cold[2] > 0.8 && hot[2] < 0.6);
}

#[test]
fn top_k_one_equals_greedy() {
    let mut g = sampler(&SamplingParams::greedy(), 0);
    let mut k = sampler(&params(|p| p.top_k = Some(1)), 0);
    let mut x = 12345u64;
    for _ in 0..200 {
        let logits: Vec<f32> = (0..50)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) % 7) as f32 // many ties
            })
            .collect();
        assert_eq!(sample(&mut g, &logits).token, sample(&mut k, &logits).token);
    }
}

#[test]
fn top_k_renormalises_over_the_k_best() {
    let probs = [0.1, 0.4, 0.2, 0.3];
    let got = frequencies(&params(|p| p.top_k = Some(2)), &ln(&probs), 20_000, 5);
    let want = [0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7];
    assert!(max_abs_diff(&got, &want) < 0.02, "{got:?}");
}

#[test]
fn top_p_keeps_smallest_set_reaching_mass() {
    // Sorted probs 0.5 (id 1), 0.3 (id 3), 0.15 (id 0), 0.05 (id 2).
    let probs = [0.15, 0.5, 0.05, 0.3];
    let logits = ln(&probs);
    // p = 0.8 needs {1, 3} exactly (mass 0.8); p = 0.85 needs {1, 3, 0}.
    let got = frequencies(&params(|p| p.top_p = 0.8), &logits, 20_000, 9);
    assert!(
        max_abs_diff(&got, &[0.0, 0.625, 0.0, 0.375]) < 0.02,
        "{got:?}"
    );
    let got = frequencies(&params(|p| p.top_p = 0.85), &logits, 20_000, 9);
    assert!(
        max_abs_diff(&got, &[0.15 / 0.95, 0.5 / 0.95, 0.0, 0.3 / 0.95]) < 0.02,
        "{got:?}"
    );
    assert_eq!(got[2], 0.0);
    // A tiny p keeps only the most likely token.
    let got = frequencies(&params(|p| p.top_p = 0.01), &logits, 1000, 9);
    assert_eq!(got[1], 1.0);
}

#[test]
fn min_p_threshold_is_relative_to_top_prob() {
    let probs = [0.5, 0.3, 0.15, 0.05];
    // min_p 0.2: threshold 0.1, keeps 0.5, 0.3, 0.15.
    let got = frequencies(&params(|p| p.min_p = 0.2), &ln(&probs), 20_000, 13);
    assert!(max_abs_diff(&got, &[0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]) < 0.02);
    assert_eq!(got[3], 0.0);
    // min_p 0.7: threshold 0.35, keeps only the top token.
    let got = frequencies(&params(|p| p.min_p = 0.7), &ln(&probs), 1000, 13);
    assert_eq!(got[0], 1.0);
}

#[test]
fn repetition_penalty_hand_example() {
    let p = params(|p| {
        p.temperature = 0.0;
        p.repetition_penalty = 2.0;
    });
    let mut s = sampler(&p, 0);
    let mut row = vec![3.0, 2.0, -1.0, 1.0];
    // 0 in prompt, 2 in output: 3 / 2 = 1.5, -1 * 2 = -2.
    let out = s.sample(&mut row, &[0, 0], &[2]);
    assert_eq!(row, vec![1.5, 2.0, -2.0, 1.0]);
    assert_eq!(out.map(|o| o.token), Ok(1));
}

#[test]
fn presence_and_frequency_penalties_hand_example() {
    let p = params(|p| {
        p.temperature = 0.0;
        p.presence_penalty = 0.5;
        p.frequency_penalty = 0.4;
    });
    let mut s = sampler(&p, 0);
    let mut row = vec![2.0, 1.9, 0.0, 1.0];
    // Token 0 twice in output: 2 - 0.8 - 0.5 = 0.7. Token 3 only in the prompt: untouched.
    let out = s.sample(&mut row, &[3], &[0, 0]);
    assert_eq!(row, vec![2.0 - 0.8 - 0.5, 1.9, 0.0, 1.0]);
    assert_eq!(out.map(|o| o.token), Ok(1));
    // Incremental: one more 1 in the output.
    let mut row = vec![2.0, 1.9, 0.0, 1.0];
    let _ = s.sample(&mut row, &[3], &[0, 0, 1]);
    assert_eq!(row, vec![2.0 - 0.8 - 0.5, 1.9 - 0.4 - 0.5, 0.0, 1.0]);
}

#[test]
fn seeded_sampling_is_reproducible() {
    let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
    let p = params(|p| {
        p.seed = Some(42);
        p.top_p = 0.9;
    });
    let run = |fallback: u64| {
        let mut s = sampler(&p, fallback);
        (0..100)
            .map(|_| sample(&mut s, &logits).token)
            .collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a, run(2), "params.seed overrides the fallback");
    let other = params(|q| {
        q.seed = Some(43);
        q.top_p = 0.9;
    });
    let mut s = sampler(&other, 1);
    let b: Vec<u32> = (0..100).map(|_| sample(&mut s, &logits).token).collect();
    assert_ne!(a, b);
    // Without a seed the fallback decides.
    let unseeded = params(|q| q.top_p = 0.9);
    let mut s1 = sampler(&unseeded, 42);
    let mut s2 = sampler(&unseeded, 42);
    for _ in 0..100 {
        assert_eq!(
            sample(&mut s1, &logits).token,
            sample(&mut s2, &logits).token
        );
    }
}

#[test]
fn seeded_output_is_independent_of_the_batch() {
    let logits: Vec<f32> = (0..64).map(|i| ((i * 13) % 17) as f32 * 0.25).collect();
    let p = params(|p| p.seed = Some(7));
    let mut alone = sampler(&p, 0);
    let solo: Vec<u32> = (0..100)
        .map(|_| sample(&mut alone, &logits).token)
        .collect();

    let mut mine = sampler(&p, 0);
    let mut others: Vec<Sampler> = (0..5)
        .map(|i| sampler(&params(|q| q.temperature = 0.5 + i as f32 * 0.3), i))
        .collect();
    others.push(sampler(&SamplingParams::greedy(), 99));
    let mut batched = Vec::new();
    for step in 0..100 {
        // A varying number of other requests run before and after ours in each step.
        for o in others.iter_mut().take(step % 7) {
            sample(o, &logits);
        }
        batched.push(sample(&mut mine, &logits).token);
        for o in others.iter_mut().skip(step % 3) {
            sample(o, &logits);
        }
    }
    assert_eq!(solo, batched);
}

#[test]
fn choices_use_different_streams() {
    let logits: Vec<f32> = vec![0.0; 32];
    let p = params(|p| p.seed = Some(5));
    let seq = |choice: usize| {
        let mut s = match Sampler::for_choice(&p, 0, choice) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        (0..20)
            .map(|_| sample(&mut s, &logits).token)
            .collect::<Vec<_>>()
    };
    assert_eq!(seq(0), {
        let mut s = sampler(&p, 0);
        (0..20)
            .map(|_| sample(&mut s, &logits).token)
            .collect::<Vec<_>>()
    });
    assert_ne!(seq(0), seq(1));
    assert_eq!(seq(1), seq(1));
}

#[test]
fn logprobs_are_raw_log_softmax_sorted() {
    let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
    let lse = logits.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln();
    // Penalties and temperature do not change the reported (raw) logprobs.
    let p = params(|p| {
        p.logprobs = Some(3);
        p.temperature = 0.7;
        p.frequency_penalty = 1.0;
        p.seed = Some(1);
    });
    let mut s = sampler(&p, 0);
    for step in 0..20 {
        let mut row = logits.to_vec();
        let out = match s.sample(&mut row, &[], &[1, 1, 2]) {
            Ok(o) => o,
            Err(e) => panic!("{e}"),
        };
        let want = logits[out.token as usize] as f64 - lse;
        let got = out.logprob.unwrap_or(f32::NAN) as f64;
        assert!((got - want).abs() < 1e-5, "step {step}: {got} vs {want}");
        let top: Vec<u32> = out.top_logprobs.iter().map(|t| t.0).collect();
        assert_eq!(top, vec![1, 3, 2]);
        for w in out.top_logprobs.windows(2) {
            assert!(w[0].1 >= w[1].1);
        }
        for &(t, lp) in &out.top_logprobs {
            assert!((lp as f64 - (logits[t as usize] as f64 - lse)).abs() < 1e-5);
        }
    }
    // Some(0): the sampled token's logprob only; None: nothing.
    let mut s = sampler(&params(|p| p.logprobs = Some(0)), 0);
    let out = sample(&mut s, &logits);
    assert!(out.logprob.is_some() && out.top_logprobs.is_empty());
    let mut s = sampler(&SamplingParams::default(), 0);
    let out = sample(&mut s, &logits);
    assert!(out.logprob.is_none() && out.top_logprobs.is_empty());
}

#[test]
fn errors_are_typed() {
    let mut s = sampler(&SamplingParams::default(), 0);
    assert_eq!(s.sample(&mut [], &[], &[]), Err(SampleError::EmptyLogits));
    let mut row = [f32::NEG_INFINITY, f32::NAN];
    assert_eq!(s.sample(&mut row, &[], &[]), Err(SampleError::NoCandidates));
    let mut g = sampler(&SamplingParams::greedy(), 0);
    assert_eq!(g.sample(&mut row, &[], &[]), Err(SampleError::NoCandidates));
    let mut p = sampler(&params(|p| p.repetition_penalty = 1.2), 0);
    assert_eq!(
        p.sample(&mut [0.0, 1.0], &[5], &[]),
        Err(SampleError::TokenOutOfVocab {
            token: 5,
            vocab_size: 2
        })
    );
    let bad = params(|p| p.top_p = 0.0);
    assert_eq!(
        Sampler::new(&bad, 0).err().map(|e| e.field()),
        Some("top_p")
    );
}

#[test]
fn large_vocab_top_k_and_top_p() {
    let vocab = 151_936;
    let mut x = 99u64;
    let logits: Vec<f32> = (0..vocab)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 * 12.0 - 6.0
        })
        .collect();
    let mut sorted: Vec<f32> = logits.clone();
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    let kth = sorted[49];
    let mut s = sampler(&params(|p| p.top_k = Some(50)), 3);
    for _ in 0..50 {
        let t = sample(&mut s, &logits).token;
        assert!(logits[t as usize] >= kth);
    }
    let mut s = sampler(&params(|p| p.top_p = 0.9), 3);
    for _ in 0..5 {
        let _ = sample(&mut s, &logits);
    }
}

/// A reference check of one sampled token against the processed distribution.
fn check_token(p: &SamplingParams, processed: &[f32], token: u32) -> Result<(), TestCaseError> {
    let t = token as usize;
    let max = processed.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    if p.is_greedy() {
        let first = processed.iter().position(|&l| l == max);
        prop_assert_eq!(Some(t), first);
        return Ok(());
    }
    let probs = softmax(processed, p.temperature as f64);
    prop_assert!(probs[t] > 0.0, "zero probability token");
    if let Some(k) = p.effective_top_k() {
        let better = processed.iter().filter(|&&l| l > processed[t]).count();
        prop_assert!(better < k, "token not in the top {}", k);
    }
    // Inside the nucleus: the mass strictly above the token is below p (renormalised to top-k).
    let kept: Vec<usize> = match p.effective_top_k() {
        Some(k) => {
            let mut idx: Vec<usize> = (0..probs.len()).collect();
            idx.sort_by(|&a, &b| processed[b].total_cmp(&processed[a]).then(a.cmp(&b)));
            idx.truncate(k.max(idx.iter().position(|&i| i == t).map_or(0, |x| x + 1)));
            idx
        }
        None => (0..probs.len()).collect(),
    };
    let total: f64 = kept.iter().map(|&i| probs[i]).sum();
    let above: f64 = kept
        .iter()
        .filter(|&&i| probs[i] > probs[t])
        .map(|&i| probs[i])
        .sum();
    prop_assert!(above / total < p.top_p as f64 + 1e-4, "outside the nucleus");
    let pmax = probs.iter().cloned().fold(0.0, f64::max);
    prop_assert!(
        probs[t] >= p.min_p as f64 * pmax * (1.0 - 1e-4),
        "below min_p"
    );
    Ok(())
}

proptest! {
    #[test]
    fn sampled_token_survives_every_filter(
        logits in proptest::collection::vec(-8.0f32..8.0, 1..60),
        temperature in prop_oneof![Just(0.0f32), 0.05f32..3.0],
        top_k in proptest::option::of(0usize..12),
        top_p in 0.01f32..=1.0,
        min_p in prop_oneof![Just(0.0f32), 0.0f32..1.0],
        rep in 0.5f32..2.0,
        pres in -2.0f32..2.0,
        freq in -2.0f32..2.0,
        history in proptest::collection::vec(0u32..60, 0..20),
        seed in any::<u64>(),
    ) {
        let vocab = logits.len() as u32;
        let history: Vec<u32> = history.into_iter().map(|t| t % vocab).collect();
        let (prompt, output) = history.split_at(history.len() / 2);
        let p = SamplingParams {
            temperature, top_k, top_p, min_p,
            repetition_penalty: rep, presence_penalty: pres, frequency_penalty: freq,
            seed: Some(seed), logprobs: Some(5),
            ..SamplingParams::default()
        };
        let mut s = sampler(&p, 0);
        let mut row = logits.clone();
        let out = s.sample(&mut row, prompt, output);
        prop_assert!(out.is_ok());
        if let Ok(out) = out {
            prop_assert!((out.token as usize) < logits.len());
            check_token(&p, &row, out.token)?;
            prop_assert!(out.logprob.is_some_and(|l| l <= 1e-6));
            prop_assert!(out.top_logprobs.len() == logits.len().min(5));
        }
    }
}

/// Rough per-token cost on a Qwen-sized vocabulary (`cargo test -- --ignored --nocapture`).
#[test]
#[ignore]
fn timing_large_vocab() {
    let vocab = 151_936;
    let mut x = 7u64;
    let logits: Vec<f32> = (0..vocab)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 * 20.0 - 10.0
        })
        .collect();
    let cases: Vec<(&str, SamplingParams)> = vec![
        ("greedy", SamplingParams::greedy()),
        ("temperature 1", SamplingParams::default()),
        ("top_k 50", params(|p| p.top_k = Some(50))),
        ("top_p 0.9", params(|p| p.top_p = 0.9)),
        (
            "top_p 0.9 + penalties + logprobs 5",
            params(|p| {
                p.top_p = 0.9;
                p.frequency_penalty = 0.5;
                p.repetition_penalty = 1.1;
                p.logprobs = Some(5);
            }),
        ),
    ];
    let history: Vec<u32> = (0..512).map(|i| (i * 7919) % vocab as u32).collect();
    for (name, p) in cases {
        let mut s = sampler(&p, 1);
        let mut row = logits.clone();
        let start = std::time::Instant::now();
        let iters = 50;
        for _ in 0..iters {
            row.copy_from_slice(&logits);
            let _ = s.sample(&mut row, &history, &history[..100]);
        }
        println!("{name}: {:?} per token", start.elapsed() / iters);
    }
}
