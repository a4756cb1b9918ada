//! SmolLM2-135M-Instruct Q4_1 (the real GGUF) teacher-forced against transformers' float32
//! forward of the same file dequantized: top-1 agreement per position and logit error.
//! Quantized weights and 8-bit activations make bit equality impossible. The 8-bit activation
//! rounding (the same llama.cpp does) moves each logit by about 0.16 on average (up to ~1.2),
//! so a top-1/top-2 margin moves by about 0.25: positions with a smaller oracle margin are coin
//! flips whose outcome changes with the summation order of equally precise kernels (measured:
//! 95.2% to 97.3% raw agreement over six kernel variants; the panel kernels flip a position of
//! oracle margin 0.246 while raising agreement from 95.2% to 96.8% and halving the largest
//! log-prob error). The test asserts: every position whose oracle margin is at least four
//! times the mean logit error (0.64: 260 of 376 positions) agrees, raw agreement stays at
//! least 95%, the mean top-10 logit error stays below 0.2 and the top-1 log-prob error below
//! 1, with the weights in panels (the default) and row-major (`WeightLayout::Rows`).

mod common;

use common::{default_model, ids, repo_root};
use oxllm_kernels::matmul::{PanelKernel, WeightLayout};
use oxllm_models::{argmax, load_model, load_model_with, ModelKind, Session};
use oxllm_runtime::{CpuBackend, ReferenceBackend};

const CLEAR_MARGIN: f64 = 0.64;

#[test]
fn teacher_forced_top1_agreement_and_logit_error() {
    teacher_forced(WeightLayout::Panels);
}

/// The same oracle with the weights kept row-major (`--weight-layout rows`): the option reaches
/// every matrix (none is packed) and the row kernels meet the same bounds.
#[test]
fn teacher_forced_with_row_major_weights() {
    teacher_forced(WeightLayout::Rows);
}

fn teacher_forced(layout: WeightLayout) {
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/smollm2/teacher.json")).unwrap(),
    )
    .unwrap();
    let (_, model) = load_model_with(&default_model(), layout).unwrap();
    let ModelKind::Dense(dense) = &model.kind else {
        panic!("SmolLM2 is a dense model");
    };
    // Panels where the CPU has the panel kernels and the layout asks for them; rows otherwise.
    let want_panels = layout == WeightLayout::Panels && PanelKernel::best().is_some();
    for l in &dense.layers {
        for m in [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down] {
            assert_eq!(
                m.is_panels(),
                want_panels,
                "{layout} layout, {:?}",
                m.dtype()
            );
        }
    }
    eprintln!("weight layout {layout}:");
    let tokens = ids(&fixture["ids"]);
    let vocab = model.config.vocab_size;
    let mut session = Session::new(&model, tokens.len(), Box::new(CpuBackend::new(2))).unwrap();
    let logits = session.extend(&tokens, true).unwrap();

    let top_ids = fixture["top_ids"].as_array().unwrap();
    let top_logits = fixture["top_logits"].as_array().unwrap();
    let lse = fixture["logsumexp"].as_array().unwrap();
    let (mut agree, mut max_err, mut sum_err, mut n_err, mut max_lp_err) = (0, 0f32, 0f64, 0, 0f32);
    let (mut clear, mut clear_agree) = (0, 0);
    for p in 0..tokens.len() {
        let row = &logits[p * vocab..(p + 1) * vocab];
        let want = ids(&top_ids[p]);
        let oracle_margin = top_logits[p][0].as_f64().unwrap() - top_logits[p][1].as_f64().unwrap();
        let hit = argmax(row) == want[0];
        agree += usize::from(hit);
        if oracle_margin >= CLEAR_MARGIN {
            clear += 1;
            clear_agree += usize::from(hit);
            if !hit {
                let ours = argmax(row);
                eprintln!(
                    "position {p}: oracle margin {oracle_margin:.3} for {}, ours picks {ours} \
                     by {:.3}",
                    want[0],
                    row[ours as usize] - row[want[0] as usize]
                );
            }
        }
        let our_lse = {
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            m + row.iter().map(|x| (x - m).exp()).sum::<f32>().ln()
        };
        let want_lse = lse[p].as_f64().unwrap() as f32;
        for (k, &id) in want.iter().enumerate() {
            let want_logit = top_logits[p][k].as_f64().unwrap() as f32;
            let err = (row[id as usize] - want_logit).abs();
            max_err = max_err.max(err);
            sum_err += err as f64;
            n_err += 1;
            if k == 0 {
                let lp_err = ((row[id as usize] - our_lse) - (want_logit - want_lse)).abs();
                max_lp_err = max_lp_err.max(lp_err);
            }
        }
    }
    let rate = agree as f64 / tokens.len() as f64;
    eprintln!(
        "SmolLM2 Q4_1 teacher-forced over {} positions: top-1 agreement {:.1}% ({agree}), \
         top-10 logit error max {max_err:.3} mean {:.4}, top-1 log-prob error max {max_lp_err:.3}",
        tokens.len(),
        rate * 100.0,
        sum_err / n_err as f64
    );
    eprintln!("positions with oracle margin >= {CLEAR_MARGIN}: {clear_agree}/{clear} agree");
    assert_eq!(clear_agree, clear, "a clear-margin position disagrees");
    assert!(rate >= 0.95, "top-1 agreement {rate}");
    assert!(sum_err / (n_err as f64) < 0.2, "mean logit error");
    assert!(max_lp_err < 1.0, "log-prob error {max_lp_err}");
}

#[test]
fn greedy_continuations_start_like_the_oracle() {
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/smollm2/teacher.json")).unwrap(),
    )
    .unwrap();
    let (_, model) = load_model(&default_model()).unwrap();
    for case in fixture["greedy"].as_array().unwrap() {
        let prompt = ids(&case["prompt_ids"]);
        let want = ids(&case["greedy_ids"]);
        let capacity = prompt.len() + want.len();
        let mut session = Session::new(&model, capacity, Box::new(CpuBackend::new(2))).unwrap();
        let mut next = argmax(&session.extend(&prompt, false).unwrap());
        let mut got = vec![];
        for _ in 0..want.len() {
            got.push(next);
            next = argmax(&session.extend(&[next], false).unwrap());
        }
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        eprintln!(
            "greedy prefix match {same}/{} for {:?}",
            want.len(),
            case["prompt"]
        );
        // The first tokens carry the answer (" Paris") with a wide margin in the oracle.
        assert!(same >= 4, "got {got:?}, oracle {want:?}");
    }
}

/// The reference backend (scalar kernels, one thread) runs the same recorded forward as the CPU
/// backend on the real Q4_1 model: over a short prompt and greedy continuation both pick the
/// same tokens (the oracle's wide-margin " Paris" answer), and their log-probs differ by no
/// more than the 8-bit activation rounding does between equally precise kernels (module docs:
/// a last-bit difference before a quantizer flips a rounding; mean ~0.16, up to ~1.2).
#[test]
fn reference_backend_agrees_with_cpu_backend() {
    let (_, model) = load_model(&default_model()).unwrap();
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/smollm2/teacher.json")).unwrap(),
    )
    .unwrap();
    let prompt = ids(&fixture["greedy"][0]["prompt_ids"]);
    let steps = 4;
    let capacity = prompt.len() + steps;
    let mut cpu = Session::new(&model, capacity, Box::new(CpuBackend::new(2))).unwrap();
    let mut reference = Session::new(&model, capacity, Box::new(ReferenceBackend::new())).unwrap();
    let (mut a, mut b) = (
        cpu.extend(&prompt, false).unwrap(),
        reference.extend(&prompt, false).unwrap(),
    );
    for step in 0..steps {
        let (la, lb) = (log_softmax(&a), log_softmax(&b));
        let diffs = la.iter().zip(&lb).map(|(x, y)| (x - y).abs());
        let max = diffs.clone().fold(0f32, f32::max);
        let mean = diffs.sum::<f32>() / a.len() as f32;
        let top = argmax(&a) as usize;
        let top_err = (la[top] - lb[top]).abs();
        eprintln!(
            "step {step}: |log-prob diff| cpu vs reference: max {max:.3}, mean {mean:.4}, \
             top-1 {top_err:.4}"
        );
        // Measured: top-1 log-prob within 0.04, every log-prob within 0.65.
        assert!(top_err < 0.25 && max < 1.5, "step {step}: log-probs differ");
        let next = argmax(&a);
        assert_eq!(next, argmax(&b), "step {step}: greedy picks differ");
        a = cpu.extend(&[next], false).unwrap();
        b = reference.extend(&[next], false).unwrap();
    }
}

fn log_softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = m + x.iter().map(|v| (v - m).exp()).sum::<f32>().ln();
    x.iter().map(|v| v - lse).collect()
}
