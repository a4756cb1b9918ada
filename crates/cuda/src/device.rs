//! The device side of the backend: weights, one device mirror per storage slot of the
//! backend's arena, and uploaded tables, on any [`Gpu`].
//!
//! Ownership of a buffer's current bits follows its kind: `U32` / `I32` buffers (step inputs,
//! block tables, sampled ids) are written by the host and copied to the device before device
//! ops read them; `F32` / `F16` buffers (activations, the K/V pool) are written by the device
//! and copied to the host only for host ops and for buffers the host keeps.

use std::collections::HashMap;

use oxllm_core::DType;
use oxllm_runtime::arena::bytes_of;
use oxllm_runtime::{BufKind, BufRef, HostWeight, Memory, RuntimeError, WeightId, WeightSource};

use crate::gpu::{Arg, DevPtr, Gpu};

/// A weight in device memory.
#[derive(Clone, Copy)]
pub(crate) enum DevWeight {
    /// `rows x cols` row-major; `bf16`: 2-byte bf16 elements, else f32.
    Matrix {
        ptr: DevPtr,
        rows: usize,
        cols: usize,
        bf16: bool,
    },
    Vector {
        ptr: DevPtr,
        len: usize,
    },
}

struct Mirror {
    kind: BufKind,
    bytes: usize,
    ptr: DevPtr,
}

pub(crate) struct Device<G> {
    pub(crate) gpu: G,
    weights: HashMap<WeightId, DevWeight>,
    mirrors: Vec<Option<Mirror>>,
    /// Uploaded tables (e.g. RoPE inverse frequencies), keyed by their bits.
    tables: Vec<(Vec<u32>, DevPtr)>,
    /// Set while a capture records: nothing may be allocated or copied then.
    pub(crate) capturing: bool,
}

fn gpu_err(op: &'static str) -> impl Fn(String) -> RuntimeError {
    move |e| RuntimeError::op(op, e)
}

impl<G: Gpu> Device<G> {
    pub(crate) fn new(gpu: G) -> Device<G> {
        Device {
            gpu,
            weights: HashMap::new(),
            mirrors: Vec::new(),
            tables: Vec::new(),
            capturing: false,
        }
    }

    fn upload_new(&mut self, op: &'static str, bytes: &[u8]) -> Result<DevPtr, RuntimeError> {
        let ptr = self.gpu.alloc_zeroed(bytes.len()).map_err(gpu_err(op))?;
        self.gpu.upload(ptr, bytes).map_err(gpu_err(op))?;
        Ok(ptr)
    }

    /// Copies every weight of `source` to the device: f32 and f16 matrices as f32, other
    /// formats dequantized to bf16; vectors as f32. A matrix named twice (a tied output head)
    /// is kept once.
    pub(crate) fn load_weights(&mut self, source: &dyn WeightSource) -> Result<(), RuntimeError> {
        let mut seen: HashMap<usize, DevWeight> = HashMap::new();
        let mut result = Ok(());
        source.visit_weights(&mut |id, w| {
            if result.is_err() {
                return;
            }
            let loaded = match w {
                HostWeight::Matrix(m) => {
                    let key = m as *const _ as usize;
                    match seen.get(&key) {
                        Some(d) => Ok(*d),
                        None => self.upload_matrix(m).inspect(|d| {
                            seen.insert(key, *d);
                        }),
                    }
                }
                HostWeight::Vector(v) => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    self.upload_new("load_weights", &bytes)
                        .map(|ptr| DevWeight::Vector { ptr, len: v.len() })
                }
            };
            match loaded {
                Ok(d) => {
                    self.weights.insert(id, d);
                }
                Err(e) => result = Err(e),
            }
        });
        result
    }

    fn upload_matrix(
        &mut self,
        m: &oxllm_kernels::matmul::QMatrix,
    ) -> Result<DevWeight, RuntimeError> {
        let (rows, cols) = (m.rows(), m.cols());
        let f32_kept = matches!(m.dtype(), DType::F32 | DType::F16);
        let mut row = vec![0f32; cols];
        let mut bytes = Vec::with_capacity(rows * cols * if f32_kept { 4 } else { 2 });
        for r in 0..rows {
            m.dequantize_row(r, &mut row)
                .map_err(|e| RuntimeError::op("load_weights", e))?;
            if f32_kept {
                bytes.extend(row.iter().flat_map(|x| x.to_le_bytes()));
            } else {
                bytes.extend(
                    row.iter()
                        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()),
                );
            }
        }
        let ptr = self.upload_new("load_weights", &bytes)?;
        Ok(DevWeight::Matrix {
            ptr,
            rows,
            cols,
            bf16: !f32_kept,
        })
    }

    pub(crate) fn weight(&self, op: &'static str, id: WeightId) -> Result<DevWeight, RuntimeError> {
        self.weights
            .get(&id)
            .copied()
            .ok_or_else(|| RuntimeError::op(op, format!("weight {id:?} was not loaded")))
    }

    /// The device address of a vector weight of `len` elements.
    pub(crate) fn vector(
        &self,
        op: &'static str,
        id: WeightId,
        len: usize,
    ) -> Result<DevPtr, RuntimeError> {
        match self.weight(op, id)? {
            DevWeight::Vector { ptr, len: l } if l >= len => Ok(ptr),
            _ => Err(RuntimeError::op(
                op,
                format!("weight {id:?} is not a vector of {len}"),
            )),
        }
    }

    /// The device address of a table of f32 values, uploaded once.
    pub(crate) fn table(
        &mut self,
        op: &'static str,
        values: &[f32],
    ) -> Result<DevPtr, RuntimeError> {
        let bits: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        if let Some((_, ptr)) = self.tables.iter().find(|(b, _)| *b == bits) {
            return Ok(*ptr);
        }
        if self.capturing {
            return Err(RuntimeError::AllocationInCapture {
                op,
                kind: BufKind::F32,
                len: values.len(),
            });
        }
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let ptr = self.upload_new(op, &bytes)?;
        self.tables.push((bits, ptr));
        Ok(ptr)
    }

    /// The device address of `b`'s storage, allocated (zeroed) on first use.
    pub(crate) fn ptr(
        &mut self,
        op: &'static str,
        mem: &Memory,
        b: BufRef,
    ) -> Result<DevPtr, RuntimeError> {
        let (slot, kind, cap) = mem.storage_of(b).ok_or(RuntimeError::BadBuffer {
            op,
            slot: u32::MAX,
            kind: b.kind(),
        })?;
        if kind == BufKind::Host || kind == BufKind::QActs {
            return Err(RuntimeError::op(
                op,
                format!("{kind:?} buffers have no device copy"),
            ));
        }
        let bytes = bytes_of(kind, cap);
        if self.mirrors.len() <= slot {
            self.mirrors.resize_with(slot + 1, || None);
        }
        if let Some(m) = &self.mirrors[slot] {
            if m.kind == kind && m.bytes == bytes {
                return Ok(m.ptr);
            }
        }
        if self.capturing {
            return Err(RuntimeError::AllocationInCapture { op, kind, len: cap });
        }
        if let Some(old) = self.mirrors[slot].take() {
            self.gpu.free(old.ptr);
        }
        let ptr = self.gpu.alloc_zeroed(bytes).map_err(gpu_err(op))?;
        self.mirrors[slot] = Some(Mirror { kind, bytes, ptr });
        Ok(ptr)
    }

    /// Whether `b`'s storage already has a device copy.
    pub(crate) fn has_mirror(&self, mem: &Memory, b: BufRef) -> bool {
        mem.storage_of(b)
            .and_then(|(slot, kind, cap)| {
                let m = self.mirrors.get(slot)?.as_ref()?;
                Some(m.kind == kind && m.bytes == bytes_of(kind, cap))
            })
            .unwrap_or(false)
    }

    /// Copies the first `b.len` elements of a host-written buffer to the device.
    pub(crate) fn upload(
        &mut self,
        op: &'static str,
        mem: &Memory,
        b: BufRef,
    ) -> Result<(), RuntimeError> {
        let ptr = self.ptr(op, mem, b)?;
        let bytes: Vec<u8> = match b.kind() {
            BufKind::U32 => mem
                .u32(op, b)?
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            BufKind::I32 => mem
                .i32(op, b)?
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            BufKind::F32 => mem
                .f32(op, b)?
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            k => {
                return Err(RuntimeError::op(
                    op,
                    format!("cannot upload a {k:?} buffer"),
                ))
            }
        };
        if bytes.is_empty() {
            return Ok(());
        }
        self.gpu.upload(ptr, &bytes).map_err(gpu_err(op))
    }

    /// Copies the first `b.len` elements of a device-written buffer to the host (nothing when
    /// the buffer never had a device copy).
    pub(crate) fn download(
        &mut self,
        op: &'static str,
        mem: &Memory,
        b: BufRef,
    ) -> Result<(), RuntimeError> {
        if !self.has_mirror(mem, b) || b.len == 0 {
            return Ok(());
        }
        let ptr = self.ptr(op, mem, b)?;
        match b.kind() {
            BufKind::F32 => {
                let mut host = mem.f32_mut(op, b)?;
                let mut bytes = vec![0u8; host.len() * 4];
                self.gpu.download(ptr, &mut bytes).map_err(gpu_err(op))?;
                for (h, c) in host.iter_mut().zip(bytes.chunks_exact(4)) {
                    *h = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            BufKind::F16 => {
                let mut host = mem.f16_mut(op, b)?;
                let mut bytes = vec![0u8; host.len() * 2];
                self.gpu.download(ptr, &mut bytes).map_err(gpu_err(op))?;
                for (h, c) in host.iter_mut().zip(bytes.chunks_exact(2)) {
                    *h = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Launches kernel `name` (a grid with a zero dimension launches nothing).
    pub(crate) fn launch(
        &mut self,
        op: &'static str,
        name: &'static str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), RuntimeError> {
        if grid.0 == 0 || grid.1 == 0 {
            return Ok(());
        }
        self.gpu
            .launch(name, grid, block, args)
            .map_err(gpu_err(op))
    }

    pub(crate) fn sync(&mut self, op: &'static str) -> Result<(), RuntimeError> {
        self.gpu.synchronize().map_err(gpu_err(op))
    }
}
