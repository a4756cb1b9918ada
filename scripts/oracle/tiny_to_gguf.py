"""Writes GGUF copies of the tiny Llama / Qwen2 / Qwen3 checkpoints, so the GGUF loading path of
each architecture is checked against the same transformers oracle as the safetensors path.

Follows llama.cpp's conventions (facts of the format, written here from scratch): tensor names
`token_embd`, `blk.N.attn_q` ..., metadata `<arch>.embedding_length` etc., dims stored innermost
first, and for Llama the rows of Q and K permuted so GGML's adjacent-pair RoPE applies (Qwen2/3
keep the split-half layout and are not permuted). Tensors are stored as F32 (and Q8_0 for one
copy, to exercise a quantized GGUF). No tokenizer: tests feed ids.

Run: $HOME/.cache/oxllm/venv-oracle/bin/python scripts/oracle/tiny_to_gguf.py
"""
import json
import pathlib

import gguf
import numpy as np
from safetensors.numpy import load_file

ROOT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "tiny"


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    rows, cols = w.shape
    head_dim = rows // n_head
    return w.reshape(n_head, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def convert(src: str, arch: str, quant: bool) -> None:
    d = ROOT / src
    cfg = json.loads((d / "config.json").read_text())
    tensors = load_file(str(d / "model.safetensors"))
    out_name = f"{src}{'-q8_0' if quant else ''}.gguf"
    w = gguf.GGUFWriter(str(ROOT / out_name), arch)
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    theta = cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for name, t in sorted(tensors.items()):
        t = t.astype(np.float32)
        if name == "model.embed_tokens.weight":
            out = "token_embd.weight"
        elif name == "model.norm.weight":
            out = "output_norm.weight"
        elif name == "lm_head.weight":
            out = "output.weight"
        else:
            parts = name.split(".")
            out = f"blk.{parts[2]}." + names[".".join(parts[3:])]
            if arch == "llama" and parts[-2] == "q_proj":
                t = permute_qk(t, n_head)
            if arch == "llama" and parts[-2] == "k_proj":
                t = permute_qk(t, n_kv)
        if quant and t.ndim == 2 and t.shape[1] % 32 == 0:
            q = gguf.quants.quantize(t, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(out, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(out, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", out_name)


if __name__ == "__main__":
    convert("llama-f32", "llama", False)
    convert("qwen2-f32", "qwen2", False)
    convert("qwen3-f32", "qwen3", False)
    convert("llama-f32", "llama", True)
