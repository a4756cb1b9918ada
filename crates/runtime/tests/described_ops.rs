//! Ops as data on the host backends: a small step of op descriptions over weights the backend
//! was handed, run by the CPU backend (fast kernels, two threads; eager and captured) and the
//! reference backend (scalar kernels), checked against a plain f64 computation of the same
//! arithmetic, and refused cleanly when a weight was never handed over or an input is bad.

use oxllm_core::DType;
use oxllm_kernels::matmul::QMatrix;
use oxllm_runtime::{
    Backend, BufKind, BufRef, CpuBackend, HostWeight, LayerWeight, MatmulJob, OpDesc,
    ReferenceBackend, RuntimeError, WeightId, WeightSource,
};
use std::sync::Arc;

const VOCAB: usize = 8;
const HIDDEN: usize = 32;
const OUT: usize = 16;
const EPS: f32 = 1e-5;

/// Embeddings `[VOCAB, HIDDEN]`, a norm, and one projection `[OUT, HIDDEN]` with a bias, all f32.
struct Tiny {
    embeddings: QMatrix,
    norm: Vec<f32>,
    proj: QMatrix,
    bias: Vec<f32>,
    emb_f32: Vec<f32>,
    proj_f32: Vec<f32>,
}

fn f32_matrix(rows: usize, cols: usize, f: impl Fn(usize) -> f32) -> (QMatrix, Vec<f32>) {
    let v: Vec<f32> = (0..rows * cols).map(f).collect();
    let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    (QMatrix::new(DType::F32, rows, cols, bytes).unwrap(), v)
}

impl Tiny {
    fn new() -> Tiny {
        let (embeddings, emb_f32) =
            f32_matrix(VOCAB, HIDDEN, |i| ((i * 7 % 23) as f32 - 11.0) / 9.0);
        let (proj, proj_f32) = f32_matrix(OUT, HIDDEN, |i| ((i * 5 % 17) as f32 - 8.0) / 13.0);
        Tiny {
            embeddings,
            norm: (0..HIDDEN)
                .map(|i| 0.5 + i as f32 / HIDDEN as f32)
                .collect(),
            proj,
            bias: (0..OUT).map(|i| i as f32 * 0.25 - 1.0).collect(),
            emb_f32,
            proj_f32,
        }
    }
}

const NORM: WeightId = WeightId::Layer(0, LayerWeight::AttnNorm);
const PROJ: WeightId = WeightId::Layer(0, LayerWeight::Wq);
const BIAS: WeightId = WeightId::Layer(0, LayerWeight::Bq);

impl WeightSource for Tiny {
    fn visit_weights(&self, visit: &mut dyn FnMut(WeightId, HostWeight<'_>)) {
        visit(WeightId::Embeddings, HostWeight::Matrix(&self.embeddings));
        visit(NORM, HostWeight::Vector(&self.norm));
        visit(PROJ, HostWeight::Matrix(&self.proj));
        visit(BIAS, HostWeight::Vector(&self.bias));
    }
    fn matrix(&self, id: WeightId) -> Option<&QMatrix> {
        match id {
            WeightId::Embeddings => Some(&self.embeddings),
            PROJ => Some(&self.proj),
            _ => None,
        }
    }
    fn vector(&self, id: WeightId) -> Option<&[f32]> {
        match id {
            NORM => Some(&self.norm),
            BIAS => Some(&self.bias),
            _ => None,
        }
    }
}

struct Io {
    tokens: BufRef,
    out: BufRef,
}

/// embed -> rms_norm -> quantize -> two products p (+ bias) into `out` and `y` in one matmul
/// -> y += out (2p) -> out = silu(out) * y.
fn record(b: &mut dyn Backend, io: &Io, rows: usize) -> Result<(), RuntimeError> {
    let x = b.alloc("embed", BufKind::F32, rows * HIDDEN)?;
    b.launch(OpDesc::Embed {
        tokens: io.tokens.prefix(rows),
        out: x,
        hidden: HIDDEN,
    })?;
    let normed = b.alloc("rms_norm", BufKind::F32, rows * HIDDEN)?;
    b.launch(OpDesc::RmsNorm {
        weight: NORM,
        x,
        out: normed,
        cols: HIDDEN,
        eps: EPS,
    })?;
    let bytes = rows * DType::F32.row_bytes(HIDDEN).unwrap();
    let acts = b.alloc("quantize", BufKind::QActs, bytes)?;
    b.launch(OpDesc::Quantize {
        x: normed,
        out: acts,
        rows,
        cols: HIDDEN,
        dtype: DType::F32,
    })?;
    let out = io.out.prefix(rows * OUT);
    let y = b.alloc("matmul", BufKind::F32, rows * OUT)?;
    let job = |out| MatmulJob {
        weight: PROJ,
        bias: Some(BIAS),
        input: normed,
        acts,
        out,
    };
    let jobs = vec![job(out), job(y)];
    b.launch(OpDesc::Matmul {
        rows,
        cols: HIDDEN,
        jobs,
    })?;
    b.launch(OpDesc::Add { acc: y, x: out })?;
    b.launch(OpDesc::SiluMul { gate: out, up: y })?;
    Ok(())
}

fn setup(b: &mut dyn Backend, rows: usize) -> Io {
    Io {
        tokens: b.alloc_persistent(BufKind::U32, rows).unwrap(),
        out: b.alloc_persistent(BufKind::F32, rows * OUT).unwrap(),
    }
}

fn write_tokens(b: &mut dyn Backend, io: &Io, tokens: &[u32]) {
    let mem = b.host_access("test", true).unwrap();
    mem.u32_mut("test", io.tokens.prefix(tokens.len()))
        .unwrap()
        .copy_from_slice(tokens);
}

fn read_out(b: &mut dyn Backend, io: &Io, rows: usize) -> Vec<f32> {
    let mem = b.host_access("test", false).unwrap();
    let v = mem.f32("test", io.out.prefix(rows * OUT)).unwrap().to_vec();
    v
}

fn eager(b: &mut dyn Backend, tokens: &[u32]) -> Result<Vec<f32>, RuntimeError> {
    let io = setup(b, tokens.len());
    write_tokens(b, &io, tokens);
    b.begin_step()?;
    let r = record(b, &io, tokens.len()).and_then(|()| b.host_access("test", false).map(|_| ()));
    let out = r.map(|()| read_out(b, &io, tokens.len()));
    b.end_step()?;
    out
}

/// The product `p = W · rms_norm(e) + b` of one token, in f64 from the weights' f32 values.
fn expected_product(t: &Tiny, token: u32) -> Vec<f64> {
    let e = &t.emb_f32[token as usize * HIDDEN..(token as usize + 1) * HIDDEN];
    let ms = e.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / HIDDEN as f64;
    let inv = 1.0 / (ms + EPS as f64).sqrt();
    let n: Vec<f64> = e
        .iter()
        .zip(&t.norm)
        .map(|(&v, &w)| v as f64 * inv * w as f64)
        .collect();
    (0..OUT)
        .map(|o| {
            let row = &t.proj_f32[o * HIDDEN..(o + 1) * HIDDEN];
            row.iter().zip(&n).map(|(&w, &x)| w as f64 * x).sum::<f64>() + t.bias[o] as f64
        })
        .collect()
}

#[test]
fn both_host_backends_run_descriptions_with_the_weights_they_were_handed() {
    let tiny = Arc::new(Tiny::new());
    let tokens = [3u32, 0, 7, 3, 5];
    let mut results = Vec::new();
    let backends: Vec<Box<dyn Backend>> = vec![
        Box::new(CpuBackend::new(2)),
        Box::new(ReferenceBackend::new()),
    ];
    for mut b in backends {
        b.load_weights(tiny.clone()).unwrap();
        results.push(eager(b.as_mut(), &tokens).unwrap());
    }
    for (i, &t) in tokens.iter().enumerate() {
        let p = expected_product(&tiny, t);
        for o in 0..OUT {
            let want = p[o] / (1.0 + (-p[o]).exp()) * 2.0 * p[o];
            for r in &results {
                let got = r[i * OUT + o] as f64;
                assert!(
                    (got - want).abs() < 1e-4 * want.abs().max(1.0),
                    "{got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn a_captured_step_of_descriptions_replays_the_eager_bits() {
    let tiny = Arc::new(Tiny::new());
    let mut b = CpuBackend::new(2);
    b.load_weights(tiny.clone()).unwrap();
    let io = setup(&mut b, 4);
    b.warm_step().unwrap();
    record(&mut b, &io, 4).unwrap();
    b.end_step().unwrap();
    b.begin_capture().unwrap();
    record(&mut b, &io, 4).unwrap();
    let plan = b.end_capture().unwrap();
    for tokens in [[1u32, 2, 3, 4], [7, 7, 0, 6]] {
        write_tokens(&mut b, &io, &tokens);
        b.replay(&plan).unwrap();
        let replayed = read_out(&mut b, &io, 4);
        let mut fresh = CpuBackend::new(2);
        fresh.load_weights(tiny.clone()).unwrap();
        assert_eq!(replayed, eager(&mut fresh, &tokens).unwrap());
    }
}

#[test]
fn a_backend_never_handed_the_weights_refuses_by_weight_id() {
    let mut b = CpuBackend::new(1);
    let err = eager(&mut b, &[1, 2]).unwrap_err();
    assert_eq!(
        err,
        RuntimeError::MissingWeight {
            op: "embed",
            id: WeightId::Embeddings
        }
    );
}

#[test]
fn a_token_outside_the_vocabulary_is_an_error_naming_the_op() {
    let mut b = ReferenceBackend::new();
    b.load_weights(Arc::new(Tiny::new())).unwrap();
    match eager(&mut b, &[1, VOCAB as u32]) {
        Err(RuntimeError::Op { op: "embed", msg }) => assert!(msg.contains("vocabulary"), "{msg}"),
        other => panic!("expected an embed error, got {other:?}"),
    }
}
