"""KV-cache events on ZeroMQ in vLLM's wire format, consumed as llm-d's indexer consumes them
(run by scripts/server-tests.sh, which passes BASE_URL MODEL OXLLM_BINARY MODEL_PATH; this file
starts its own servers with `--kv-events-config` and a small KV pool).

A SUB socket (pyzmq) receives three-frame messages (topic, 8-byte big-endian sequence,
MessagePack batch) and decodes them with its own reading of vLLM's structs: `[ts, events]`, each
event an array tagged by name. Checked: the topic, sequence numbers without gaps, a snapshot
(AllBlocksCleared first) once the subscriber is connected, BlockStored hashes equal to the ones
recomputed in Python from the prompt's /tokenize ids and the scheme in docs/DEPLOY.md, each
block's tokens, parent chaining, BlockRemoved for every evicted block, and a mirror that
replays cleanly. Both socket roles: the server binds (`tcp://*:PORT`) and the subscriber
connects; the subscriber binds (llm-d's indexer) and the server connects. Bad configs and a
port in use stop the server at start with a message naming the problem.

Prints one line per check and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import msgpack
import openai
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_kv_events import (  # noqa: E402  (the documented hash, prompts, mirror replay)
    BLOCK_SIZE, NUM_BLOCKS, PROMPTS, ROOT, block_hash, prompt_block_hashes, replay, tokenize)

BASE_URL, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
TOPIC = "kv@pod-a@" + MODEL
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server(config):
    proc = subprocess.Popen(
        [OXLLM, "serve", "--model", MODEL_PATH, "--port", "0", "--served-model-name", MODEL,
         "--threads", "1", "--max-num-seqs", "2", "--num-blocks", str(NUM_BLOCKS),
         "--kv-events-config", json.dumps(config)],
        stderr=subprocess.PIPE, text=True,
    )
    log, url, ready = [], [None], threading.Event()

    def read():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                url[0] = m.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(180)
    return proc, url[0], log


def decode(parts):
    """One message as (topic, seq, batch as the JSON shape test_kv_events' replay reads)."""
    topic, seq, payload = parts
    ts, events = msgpack.unpackb(payload, raw=False)
    out = []
    for ev in events:
        tag = ev[0]
        if tag == "BlockStored":
            hashes, parent, tokens, block_size, lora_id, medium = ev[1:7]
            out.append({"type": tag, "block_hashes": [h.hex() for h in hashes],
                        "parent_block_hash": parent.hex() if parent is not None else None,
                        "token_ids": tokens, "block_size": block_size, "lora_id": lora_id,
                        "medium": medium, "raw_hashes": hashes})
        elif tag == "BlockRemoved":
            out.append({"type": tag, "block_hashes": [h.hex() for h in ev[1]], "medium": ev[2]})
        else:
            out.append({"type": tag})
    return topic.decode(), int.from_bytes(seq, "big"), {"ts": ts, "events": out}


def receive(sub, quiet=1.5):
    """Every message until none has come for `quiet` seconds."""
    got = []
    while sub.poll(int(quiet * 1000)):
        parts = sub.recv_multipart()
        got.append(parts if len(parts) != 3 else decode(parts))
    return got


def well_formed(msgs):
    return all(isinstance(m, tuple) for m in msgs)


def exercise(label, url, sub):
    """Snapshot, one prompt's blocks, eviction; checks named with `label`."""
    snap = receive(sub, quiet=2.0)
    check(f"{label}: every message has three frames", well_formed(snap), str(snap[:1]))
    check(f"{label}: the first batch after connecting is a snapshot (AllBlocksCleared first)",
          bool(snap) and snap[0][2]["events"][0]["type"] == "AllBlocksCleared", str(snap[:1]))
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
    ids = tokenize(url, PROMPTS[0])
    want = prompt_block_hashes(ids)
    client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=8, temperature=0)
    msgs = snap + receive(sub)
    for text in PROMPTS[1:]:
        client.completions.create(model=MODEL, prompt=text, max_tokens=8, temperature=0)
    msgs += receive(sub)
    check(f"{label}: every message has three frames", well_formed(msgs))
    msgs = [m for m in msgs if isinstance(m, tuple)]
    check(f"{label}: the topic frame is the configured one", all(t == TOPIC for t, _, _ in msgs),
          str({t for t, _, _ in msgs}))
    seqs = [s for _, s, _ in msgs]
    check(f"{label}: sequence numbers count up by one", seqs == list(range(seqs[0], seqs[0] + len(seqs))),
          str(seqs))
    check(f"{label}: ts is a float of seconds since the epoch",
          all(isinstance(b["ts"], float) and abs(b["ts"] - time.time()) < 600 for _, _, b in msgs))
    stored, chain_ok, kinds_ok = {}, True, True
    for _, _, b in msgs:
        for ev in b["events"]:
            if ev["type"] != "BlockStored":
                continue
            kinds_ok &= all(isinstance(h, bytes) and len(h) == 16 for h in ev["raw_hashes"])
            kinds_ok &= ev["block_size"] == BLOCK_SIZE and ev["lora_id"] is None and ev["medium"] == "CPU"
            parent = bytes.fromhex(ev["parent_block_hash"]) if ev["parent_block_hash"] else ROOT
            for i, h in enumerate(ev["block_hashes"]):
                chunk = ev["token_ids"][i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE]
                chain_ok &= block_hash(parent, chunk).hex() == h
                stored[h] = chunk
                parent = bytes.fromhex(h)
    check(f"{label}: BlockStored fields are vLLM's (16-byte bin hashes, block_size, lora_id nil, medium)",
          kinds_ok and bool(stored))
    check(f"{label}: every stored hash recomputes from its parent and tokens", chain_ok)
    check(f"{label}: the prompt's blocks are stored under hashes recomputed from /tokenize ids, with its tokens",
          all(stored.get(h) == ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE] for i, h in enumerate(want)),
          f"want {want}, got {list(stored)[:6]}")
    mirror, problems = set(), []
    replay([(s, b) for _, s, b in msgs], mirror, problems)
    removed = {h for _, _, b in msgs for ev in b["events"] if ev["type"] == "BlockRemoved"
               for h in ev["block_hashes"]}
    check(f"{label}: the mirror replays cleanly and fits the pool",
          not problems and len(mirror) <= NUM_BLOCKS - 1, f"{problems[:3]} {len(mirror)}")
    check(f"{label}: evicting the first prompt's blocks publishes BlockRemoved for each",
          set(want) <= removed, f"missing {set(want) - removed}")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    ctx = zmq.Context()
    logs = []
    try:
        # 1. The server binds (a wildcard host, as vLLM decides); the subscriber connects.
        port = free_port()
        proc, url, log = start_server({"enable_kv_cache_events": True, "publisher": "zmq",
                                       "endpoint": f"tcp://*:{port}", "topic": TOPIC})
        logs.append(log)
        check("bind: the server started", url is not None, "".join(log[-5:]))
        if url:
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt_string(zmq.SUBSCRIBE, "kv@")
            sub.connect(f"tcp://127.0.0.1:{port}")
            exercise("bind", url, sub)
            sub.close(0)
            # 3. The port is now taken: a second server on it stops at start, naming it.
            clash = subprocess.run(
                [OXLLM, "serve", "--model", MODEL_PATH, "--port", "0", "--kv-events-config",
                 json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}"})],
                capture_output=True, text=True, timeout=180)
            check("a taken event port stops the start with a message naming the endpoint",
                  clash.returncode != 0 and f"tcp://*:{port}" in clash.stderr, clash.stderr[-300:])
        stop(proc)

        # 2. The subscriber binds (as llm-d's indexer does); the server connects to it.
        port = free_port()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt_string(zmq.SUBSCRIBE, "kv@")
        sub.bind(f"tcp://127.0.0.1:{port}")
        proc, url, log = start_server({"enable_kv_cache_events": True, "publisher": "zmq",
                                       "endpoint": f"tcp://127.0.0.1:{port}", "topic": TOPIC})
        logs.append(log)
        check("connect: the server started", url is not None, "".join(log[-5:]))
        if url:
            exercise("connect", url, sub)
        sub.close(0)
        stop(proc)
        check("connect: the server exits 0 on SIGTERM", proc.returncode == 0, str(proc.returncode))

        # 4. Bad configs are start-up errors naming the field.
        for config, needle in [
            ({"enable_kv_cache_events": True, "replay_endpoint": "tcp://*:5558"}, "replay_endpoint"),
            ({"enable_kv_cache_events": True, "endpoint": "ipc:///tmp/kv"}, "endpoint"),
            ({"enable_kv_cache_events": True, "publisher": "nats"}, "publisher"),
            ({"enable_kv_cache_events": True, "no_such_key": 1}, "no_such_key"),
        ]:
            r = subprocess.run([OXLLM, "serve", "--model", MODEL_PATH, "--port", "0",
                                "--kv-events-config", json.dumps(config)],
                               capture_output=True, text=True, timeout=60)
            check(f"bad config ({needle}) stops the start naming it",
                  r.returncode != 0 and needle in r.stderr and "panicked" not in r.stderr,
                  r.stderr[-300:])
    finally:
        ctx.term()
        if failed:
            for log in logs:
                sys.stderr.write("".join(log[-20:]))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
