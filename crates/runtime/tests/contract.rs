//! The capture contract, planted violation by violation, replay on rewritten inputs, and
//! step-local buffers living exactly from their first to their last use.

use oxllm_runtime::{
    Backend, BufKind, BufRef, CpuBackend, ExecCtx, Memory, Op, ReferenceBackend, RuntimeError,
    StepOp,
};

/// `out = x * factor + 1`, elementwise.
struct Affine {
    x: BufRef,
    out: BufRef,
    factor: f32,
}

impl Op for Affine {
    fn name(&self) -> &'static str {
        "affine"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        visit(self.x);
        visit(self.out);
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let x = mem.f32(self.name(), self.x)?;
        let mut out = mem.f32_mut(self.name(), self.out)?;
        for (o, v) in out.iter_mut().zip(x.iter()) {
            *o = v * self.factor + 1.0;
        }
        Ok(())
    }
}

/// Records `input -> affine(2) -> tmp -> affine(3) -> output` with a step-local temporary.
fn record(b: &mut dyn Backend, input: BufRef, output: BufRef) -> Result<(), RuntimeError> {
    let tmp = b.alloc("affine", BufKind::F32, input.len)?;
    b.launch(StepOp::host(Affine {
        x: input,
        out: tmp,
        factor: 2.0,
    }))?;
    b.launch(StepOp::host(Affine {
        x: tmp,
        out: output,
        factor: 3.0,
    }))?;
    Ok(())
}

fn write(b: &mut dyn Backend, buf: BufRef, data: &[f32]) {
    let mem = b.host_access("test-input", true).unwrap();
    mem.f32_mut("test-input", buf)
        .unwrap()
        .copy_from_slice(data);
}

fn read(b: &mut dyn Backend, buf: BufRef) -> Vec<f32> {
    let mem = b.host_access("test-output", false).unwrap();
    let v = mem.f32("test-output", buf).unwrap().to_vec();
    v
}

#[test]
fn replay_reruns_the_recording_on_rewritten_inputs_and_matches_eager() {
    let mut b = CpuBackend::new(2);
    let input = b.alloc_persistent(BufKind::F32, 8).unwrap();
    let output = b.alloc_persistent(BufKind::F32, 8).unwrap();
    // Warm at the largest shape, then capture a smaller one from the same pool.
    b.warm_step().unwrap();
    record(&mut b, input, output).unwrap();
    b.end_step().unwrap();
    b.begin_capture().unwrap();
    record(&mut b, input.prefix(4), output.prefix(4)).unwrap();
    let plan = b.end_capture().unwrap();
    assert_eq!(plan.len(), 2);
    for round in 0..3 {
        let x: Vec<f32> = (0..4).map(|i| (i + round) as f32).collect();
        write(&mut b, input.prefix(4), &x);
        b.replay(&plan).unwrap();
        let replayed = read(&mut b, output.prefix(4));
        b.begin_step().unwrap();
        record(&mut b, input.prefix(4), output.prefix(4)).unwrap();
        b.end_step().unwrap();
        let eager = read(&mut b, output.prefix(4));
        let expected: Vec<f32> = x.iter().map(|v| (v * 2.0 + 1.0) * 3.0 + 1.0).collect();
        assert_eq!(replayed, expected);
        assert_eq!(eager, expected);
    }
}

#[test]
fn an_allocation_inside_a_capture_fails_it_naming_the_op() {
    let mut b = CpuBackend::new(1);
    let input = b.alloc_persistent(BufKind::F32, 8).unwrap();
    let output = b.alloc_persistent(BufKind::F32, 8).unwrap();
    b.begin_capture().unwrap();
    let err = record(&mut b, input, output).unwrap_err();
    assert_eq!(
        err,
        RuntimeError::AllocationInCapture {
            op: "affine",
            kind: BufKind::F32,
            len: 8
        }
    );
    b.abort_capture();
    // A pool warmed for a smaller shape does not serve a larger capture either.
    b.warm_step().unwrap();
    record(&mut b, input.prefix(4), output.prefix(4)).unwrap();
    b.end_step().unwrap();
    b.begin_capture().unwrap();
    assert!(matches!(
        record(&mut b, input, output),
        Err(RuntimeError::AllocationInCapture { op: "affine", .. })
    ));
    b.abort_capture();
    // Persistent buffers cannot be made inside a capture at all.
    b.begin_capture().unwrap();
    assert_eq!(
        b.alloc_persistent(BufKind::U32, 4).unwrap_err(),
        RuntimeError::NotInCapture("alloc_persistent")
    );
    b.abort_capture();
}

#[test]
fn host_reads_and_writes_inside_a_capture_fail_naming_the_op() {
    let mut b = CpuBackend::new(1);
    let buf = b.alloc_persistent(BufKind::F32, 4).unwrap();
    b.begin_capture().unwrap();
    assert_eq!(
        b.host_access("argmax-on-host", false).err(),
        Some(RuntimeError::HostReadInCapture {
            op: "argmax-on-host"
        })
    );
    assert_eq!(
        b.host_access("write-positions", true).err(),
        Some(RuntimeError::HostWriteInCapture {
            op: "write-positions"
        })
    );
    b.abort_capture();
    write(&mut b, buf, &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(read(&mut b, buf), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn the_reference_backend_runs_eager_and_refuses_capture() {
    let mut b = ReferenceBackend::new();
    assert!(!b.supports_capture());
    assert_eq!(
        b.begin_capture().unwrap_err(),
        RuntimeError::CaptureUnsupported("reference")
    );
    let input = b.alloc_persistent(BufKind::F32, 2).unwrap();
    let output = b.alloc_persistent(BufKind::F32, 2).unwrap();
    write(&mut b, input, &[1.0, -1.0]);
    b.begin_step().unwrap();
    record(&mut b, input, output).unwrap();
    b.end_step().unwrap();
    assert_eq!(read(&mut b, output), vec![10.0, -2.0]);
}

#[test]
fn plans_are_bound_to_their_backend_and_aliasing_is_an_error() {
    let mut a = CpuBackend::new(1);
    let mut other = CpuBackend::new(1);
    let buf = a.alloc_persistent(BufKind::F32, 2).unwrap();
    a.begin_capture().unwrap();
    a.launch(StepOp::host(Affine {
        x: buf,
        out: buf,
        factor: 1.0,
    }))
    .unwrap();
    let plan = a.end_capture().unwrap();
    assert_eq!(other.replay(&plan).unwrap_err(), RuntimeError::ForeignPlan);
    assert_eq!(
        a.replay(&plan).unwrap_err(),
        RuntimeError::Aliased {
            op: "affine",
            slot: 0
        }
    );
}

/// Records a chain `input -> t1 -> t2 -> ... -> tn -> output` of `n` step-local temporaries,
/// each read only by the next op.
fn record_chain(b: &mut dyn Backend, input: BufRef, output: BufRef, n: usize) {
    let mut x = input;
    for _ in 0..n {
        let t = b.alloc("affine", BufKind::F32, input.len).unwrap();
        b.launch(StepOp::host(Affine {
            x,
            out: t,
            factor: 1.0,
        }))
        .unwrap();
        x = t;
    }
    b.launch(StepOp::host(Affine {
        x,
        out: output,
        factor: 1.0,
    }))
    .unwrap();
}

#[test]
fn a_plan_frees_each_buffer_after_its_last_use_and_reports_its_peak() {
    let mut b = CpuBackend::new(1);
    let input = b.alloc_persistent(BufKind::F32, 64).unwrap();
    let output = b.alloc_persistent(BufKind::F32, 64).unwrap();
    b.warm_step().unwrap();
    record_chain(&mut b, input, output, 10);
    b.end_step().unwrap();
    // Two temporaries are live at once at most (an op's input and output), so the warm step
    // left two buffers in the pool, not ten, and the capture of the same chain fits in them.
    assert_eq!(b.pooled_bytes(), 2 * 64 * 4);
    b.begin_capture().unwrap();
    record_chain(&mut b, input, output, 10);
    let plan = b.end_capture().unwrap();
    assert_eq!(plan.buffer_bytes(), 10 * 64 * 4);
    assert_eq!(plan.peak_bytes(), 2 * 64 * 4);
    assert!(plan.peak_bytes() < plan.buffer_bytes());
    // Reused memory computes the same: out = in + 11 (each affine adds 1).
    write(&mut b, input, &[1.0; 64]);
    b.replay(&plan).unwrap();
    assert_eq!(read(&mut b, output), vec![12.0; 64]);
    b.begin_step().unwrap();
    record_chain(&mut b, input, output, 10);
    b.end_step().unwrap();
    assert_eq!(read(&mut b, output), vec![12.0; 64]);
}

#[test]
fn a_kept_buffer_outlives_its_last_use_for_the_host() {
    let mut b = ReferenceBackend::new();
    let input = b.alloc_persistent(BufKind::F32, 4).unwrap();
    write(&mut b, input, &[1.0, 2.0, 3.0, 4.0]);
    b.begin_step().unwrap();
    let first = b.alloc("affine", BufKind::F32, 4).unwrap();
    b.launch(StepOp::host(Affine {
        x: input,
        out: first,
        factor: 2.0,
    }))
    .unwrap();
    b.keep(first);
    // Later temporaries would take `first`'s memory if it were freed after its last use.
    let later = b.alloc("affine", BufKind::F32, 4).unwrap();
    b.launch(StepOp::host(Affine {
        x: input,
        out: later,
        factor: 0.0,
    }))
    .unwrap();
    let last = b.alloc("affine", BufKind::F32, 4).unwrap();
    b.launch(StepOp::host(Affine {
        x: later,
        out: last,
        factor: 0.0,
    }))
    .unwrap();
    assert_eq!(read(&mut b, first), vec![3.0, 5.0, 7.0, 9.0]);
    b.end_step().unwrap();
}
