#!/usr/bin/env python3
"""Random-weight benchmark models of about 100M parameters, bf16 safetensors (issue 7 speed).

Writes, under ~/.cache/oxllm/bench-models/ (or the directory given as the first argument):
  hybrid-100m/  Qwen3_5ForCausalLM: 12 layers, 3 Gated DeltaNet : 1 gated full attention
                (layer_types), dense MLPs, hidden 768, vocab 32000, tied embeddings
  dense-100m/   Qwen3ForCausalLM of the same shape (12 full-attention layers)

Only speed is measured on them, so no transformers is needed: the weights are random bf16
values of magnitude 2^-7..2^-5 with random signs (drawn from a seeded generator, so a rerun
writes the same files), RMSNorm weights 1 (0 for the `1 + w` norms of Qwen3.5). Pure Python,
no dependencies:
  nice python3 scripts/oracle/make_bench_models.py
"""
import json
import os
import random
import struct
import sys

VOCAB = 32000
HIDDEN = 768
LAYERS = 12
HEADS = 12
KV_HEADS = 4
HEAD_DIM = 64
INTER = 2048
CTX = 8192
LIN = dict(k_heads=4, v_heads=8, k_dim=64, v_dim=64, kernel=4)

COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "intermediate_size": INTER,
    "max_position_embeddings": CTX,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "dtype": "bfloat16",
}

# High byte of a bf16 (sign + top 7 exponent bits): keep the sign, exponent 120 or 121 (the
# low byte's top bit picks), i.e. |x| in [2^-7, 2^-5).
HIGH = bytes((b & 0x80) | 0x3C for b in range(256))


def random_bf16(rng, n):
    buf = bytearray(rng.randbytes(2 * n))
    buf[1::2] = bytes(buf[1::2]).translate(HIGH)
    return bytes(buf)


def const_bf16(value, n):
    bits = struct.unpack("<I", struct.pack("<f", value))[0] >> 16
    return struct.pack("<H", bits) * n


def write_model(path, config, tensors, seed):
    """tensors: list of (name, shape, kind) with kind 'rand', 'one' or 'zero'."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    header, offset = {}, 0
    for name, shape, _ in tensors:
        size = 2
        for d in shape:
            size *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    rng = random.Random(seed)
    params = 0
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape, kind in tensors:
            n = 1
            for d in shape:
                n *= d
            params += n
            if kind == "rand":
                f.write(random_bf16(rng, n))
            else:
                f.write(const_bf16(1.0 if kind == "one" else 0.0, n))
    print(f"{path}: {params / 1e6:.1f}M parameters")


def mlp(p):
    return [
        (p + "mlp.gate_proj.weight", [INTER, HIDDEN], "rand"),
        (p + "mlp.up_proj.weight", [INTER, HIDDEN], "rand"),
        (p + "mlp.down_proj.weight", [HIDDEN, INTER], "rand"),
    ]


def dense(out):
    t = [("model.embed_tokens.weight", [VOCAB, HIDDEN], "rand")]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t += [
            (p + "input_layernorm.weight", [HIDDEN], "one"),
            (p + "post_attention_layernorm.weight", [HIDDEN], "one"),
            (p + "self_attn.q_proj.weight", [HEADS * HEAD_DIM, HIDDEN], "rand"),
            (p + "self_attn.k_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN], "rand"),
            (p + "self_attn.v_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN], "rand"),
            (p + "self_attn.o_proj.weight", [HIDDEN, HEADS * HEAD_DIM], "rand"),
            (p + "self_attn.q_norm.weight", [HEAD_DIM], "one"),
            (p + "self_attn.k_norm.weight", [HEAD_DIM], "one"),
        ] + mlp(p)
    t.append(("model.norm.weight", [HIDDEN], "one"))
    config = dict(
        COMMON,
        architectures=["Qwen3ForCausalLM"],
        model_type="qwen3",
        rope_theta=1000000.0,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        layer_types=["full_attention"] * LAYERS,
    )
    write_model(out, config, t, 11)


def hybrid(out):
    kinds = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(LAYERS)]
    kw, vw = LIN["k_heads"] * LIN["k_dim"], LIN["v_heads"] * LIN["v_dim"]
    conv_dim = 2 * kw + vw
    t = [("model.embed_tokens.weight", [VOCAB, HIDDEN], "rand")]
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}."
        t += [
            (p + "input_layernorm.weight", [HIDDEN], "zero"),
            (p + "post_attention_layernorm.weight", [HIDDEN], "zero"),
        ]
        if kind == "linear_attention":
            a = p + "linear_attn."
            t += [
                (a + "in_proj_qkv.weight", [conv_dim, HIDDEN], "rand"),
                (a + "in_proj_z.weight", [vw, HIDDEN], "rand"),
                (a + "in_proj_b.weight", [LIN["v_heads"], HIDDEN], "rand"),
                (a + "in_proj_a.weight", [LIN["v_heads"], HIDDEN], "rand"),
                (a + "conv1d.weight", [conv_dim, 1, LIN["kernel"]], "rand"),
                (a + "A_log", [LIN["v_heads"]], "zero"),
                (a + "dt_bias", [LIN["v_heads"]], "zero"),
                (a + "norm.weight", [LIN["v_dim"]], "one"),
                (a + "out_proj.weight", [HIDDEN, vw], "rand"),
            ]
        else:
            a = p + "self_attn."
            t += [
                (a + "q_proj.weight", [2 * HEADS * HEAD_DIM, HIDDEN], "rand"),
                (a + "k_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN], "rand"),
                (a + "v_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN], "rand"),
                (a + "o_proj.weight", [HIDDEN, HEADS * HEAD_DIM], "rand"),
                (a + "q_norm.weight", [HEAD_DIM], "zero"),
                (a + "k_norm.weight", [HEAD_DIM], "zero"),
            ]
        t += mlp(p)
    t.append(("model.norm.weight", [HIDDEN], "zero"))
    rope = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
    config = dict(
        COMMON,
        architectures=["Qwen3_5ForCausalLM"],
        model_type="qwen3_5_text",
        layer_types=kinds,
        linear_conv_kernel_dim=LIN["kernel"],
        linear_key_head_dim=LIN["k_dim"],
        linear_value_head_dim=LIN["v_dim"],
        linear_num_key_heads=LIN["k_heads"],
        linear_num_value_heads=LIN["v_heads"],
        rope_theta=rope["rope_theta"],
        rope_parameters=rope,
    )
    write_model(out, config, t, 12)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/oxllm/bench-models")
    hybrid(os.path.join(root, "hybrid-100m"))
    dense(os.path.join(root, "dense-100m"))


if __name__ == "__main__":
    main()
