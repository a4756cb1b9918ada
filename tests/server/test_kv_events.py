"""KV-cache events for prefix-aware routing, as a router consumes them (run by
scripts/server-tests.sh, which passes BASE_URL MODEL OXLLM_BINARY MODEL_PATH; this file starts its
own server with `--kv-events` and a small KV pool).

A subscriber of GET /v1/kv_events sends a prompt with the official `openai` client and receives
BlockStored events whose block hashes it recomputes itself, here in Python with hashlib, from
the prompt's token ids (via /tokenize) and the scheme documented in docs/DEPLOY.md. Later prompts
fill the pool, so the first prompt's blocks are evicted: BlockRemoved names each of them. A
mirror replaying every event never sees a hash stored twice or an unknown one removed, and the
batches' sequence numbers have no gap. A later subscriber's stream opens with a snapshot
(AllBlocksCleared, then every cached block) that rebuilds the same set. The server without the
flag answers 404; with it, open subscriptions do not hold a SIGTERM drain up.

Prints one line per check and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import hashlib
import json
import queue
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

BASE_URL, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
BLOCK_SIZE = 16
NUM_BLOCKS = 16  # 15 usable blocks of 16 tokens: a few prompts fill the pool
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


# The documented scheme (docs/DEPLOY.md, "KV-cache events"), written from its text.
ROOT = hashlib.sha256(b"oxllm-kv-block-hash-v1").digest()[:16]


def block_hash(parent, tokens, extra=None):
    msg = parent + struct.pack("<I", len(tokens)) + struct.pack(f"<{len(tokens)}I", *tokens)
    msg += b"\x00" if extra is None else b"\x01" + struct.pack("<Q", extra)
    return hashlib.sha256(msg).digest()[:16]


def prompt_block_hashes(token_ids):
    hashes, parent = [], ROOT
    for i in range(len(token_ids) // BLOCK_SIZE):
        parent = block_hash(parent, token_ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE])
        hashes.append(parent.hex())
    return hashes


def replay(batches, mirror, problems):
    """Applies batches to a router's mirror (a set of hex hashes), noting inconsistencies."""
    for _, batch in batches:
        for ev in batch["events"]:
            if ev["type"] == "BlockStored":
                for h in ev["block_hashes"]:
                    if h in mirror:
                        problems.append(f"stored twice {h}")
                    mirror.add(h)
            elif ev["type"] == "BlockRemoved":
                for h in ev["block_hashes"]:
                    if h not in mirror:
                        problems.append(f"removed unknown {h}")
                    mirror.discard(h)
            elif ev["type"] == "AllBlocksCleared":
                mirror.clear()


def status_of(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class Subscription:
    """Reads the SSE stream on a thread; batches land in a queue as (id, parsed data)."""

    def __init__(self, url):
        self.resp = urllib.request.urlopen(url + "/v1/kv_events", timeout=300)
        self.headers = self.resp.headers
        self.batches = queue.Queue()
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        event_id = None
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line.startswith("id:"):
                    event_id = int(line[3:].strip())
                elif line.startswith("data:"):
                    self.batches.put((event_id, json.loads(line[5:].strip())))
        except Exception as e:  # the server going away mid-read ends the stream too
            self.batches.put(("error", repr(e)))
        self.ended.set()

    def drain(self, quiet=1.5):
        """Every batch that arrives until none has come for `quiet` seconds."""
        out = []
        while True:
            try:
                out.append(self.batches.get(timeout=quiet))
            except queue.Empty:
                return out


def start_server():
    proc = subprocess.Popen(
        [OXLLM, "serve", "--model", MODEL_PATH, "--port", "0", "--served-model-name", MODEL,
         "--threads", "1", "--max-num-seqs", "2", "--num-blocks", str(NUM_BLOCKS),
         "--shutdown-grace", "60", "--kv-events"],
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
    if not ready.wait(180) or url[0] is None:
        raise RuntimeError(f"server did not start: {''.join(log)}")
    return proc, url[0], log


def tokenize(url, text):
    req = urllib.request.Request(
        url + "/tokenize", data=json.dumps({"model": MODEL, "prompt": text}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["tokens"]


# Distinct openings, so no two prompts share a first block.
PROMPTS = [
    f"{opening} Write about the sea, the ships that cross it, the harbours they leave at dawn, "
    "the weather that meets them, the crews who sail them and the cargo they carry between "
    "distant ports, in plain words and short sentences, for a reader who has never seen the coast. "
    "Then say what the lighthouse keeper sees at night, and why the fishing boats return before the storm."
    for opening in ("Alpha.", "Bravo!", "Charlie?", "Delta:", "Echo;", "Foxtrot,")
]


def main():
    # 1. Off by default: the shared server (started without the flag) has no such route.
    base = BASE_URL.removesuffix("/v1")
    check("without --kv-events /v1/kv_events is 404", status_of(base + "/v1/kv_events") == 404)

    proc, url, log = start_server()
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
        sub = Subscription(url)
        check("the stream names the hash scheme",
              sub.headers.get("x-oxllm-kv-block-hash") == "oxllm-kv-block-hash-v1",
              str(dict(sub.headers)))

        # 2. One prompt: BlockStored hashes match the independent recomputation.
        first_ids = tokenize(url, PROMPTS[0])
        want = prompt_block_hashes(first_ids)
        check("the first prompt spans several full blocks", len(want) >= 4, f"{len(first_ids)} tokens")
        out = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=8, temperature=0)
        check("the prompt was tokenized as /tokenize does",
              out.usage.prompt_tokens == len(first_ids), f"{out.usage.prompt_tokens} vs {len(first_ids)}")
        batches = sub.drain()
        stored = {}  # hash -> (parent hash, tokens) from the events
        chain_ok = True
        for _, batch in batches:
            for ev in batch["events"]:
                if ev["type"] != "BlockStored":
                    continue
                parent = bytes.fromhex(ev["parent_block_hash"]) if ev["parent_block_hash"] else ROOT
                toks = ev["token_ids"]
                for i, h in enumerate(ev["block_hashes"]):
                    chunk = toks[i * ev["block_size"]:(i + 1) * ev["block_size"]]
                    chain_ok &= block_hash(parent, chunk).hex() == h
                    stored[h] = (parent.hex(), chunk)
                    parent = bytes.fromhex(h)
        check("BlockStored events arrived", len(stored) > 0, f"{batches}")
        check("every stored block hash recomputes from its parent and tokens", chain_ok)
        check("the prompt's full blocks are stored under the hashes computed from /tokenize ids",
              all(h in stored for h in want), f"want {want}, got {list(stored)}")
        check("each stored prompt block carries the prompt's tokens",
              all(stored[h][1] == first_ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE]
                  for i, h in enumerate(want) if h in stored))
        check("the first prompt block chains from the root",
              want and stored.get(want[0], ("",))[0] == ROOT.hex())

        # 3. The same prompt again is a prefix hit and stores nothing new for the prompt.
        again = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=8, temperature=0)
        details = getattr(again.usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) if details else None
        check("the repeated prompt hits the cached blocks",
              cached == len(want) * BLOCK_SIZE or cached == (len(first_ids) - 1) // BLOCK_SIZE * BLOCK_SIZE,
              f"cached_tokens={cached}")
        batches += sub.drain()

        # 4. Other prompts fill the 15-block pool and evict the first prompt's blocks.
        for text in PROMPTS[1:]:
            client.completions.create(model=MODEL, prompt=text, max_tokens=8, temperature=0)
        batches += sub.drain()

        mirror, problems = set(), []
        replay(batches, mirror, problems)
        mirror_ok = not problems
        seqs = [b.get("seq") for _, b in batches]
        ids = [i for i, _ in batches]
        removed = {h for _, b in batches for ev in b["events"] if ev["type"] == "BlockRemoved"
                   for h in ev["block_hashes"]}
        check("the mirror replays cleanly (no double store, no unknown removal)", mirror_ok, str(problems[:3]))
        check("the mirror never holds more blocks than the pool", len(mirror) <= NUM_BLOCKS - 1, str(len(mirror)))
        check("evicting the first prompt's blocks publishes BlockRemoved for each",
              set(want) <= removed, f"missing {set(want) - removed}")
        check("batch sequence numbers have no gap and match the SSE ids",
              seqs == list(range(seqs[0], seqs[0] + len(seqs))) and ids == seqs, f"{seqs} {ids}")
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            metrics = r.read().decode()
        check("no batch was dropped for this subscriber",
              re.search(r"^oxllm_kv_events_dropped_total 0$", metrics, re.M) is not None)

        # 5. A new subscriber first gets a snapshot: AllBlocksCleared, then every cached block,
        # which is exactly what the first subscriber's mirror holds (it gets the same batch).
        late = Subscription(url)
        snapshot = late.drain()
        late_mirror, late_problems = set(), []
        replay(snapshot, late_mirror, late_problems)
        replay(sub.drain(), mirror, problems)
        check("a new subscriber's stream opens with AllBlocksCleared",
              bool(snapshot) and snapshot[0][1]["events"][0]["type"] == "AllBlocksCleared", str(snapshot[:1]))
        check("the snapshot rebuilds the same set the first subscriber mirrors",
              late_mirror == mirror and len(mirror) > 0 and not late_problems and not problems,
              f"{len(late_mirror)} vs {len(mirror)}; {late_problems[:2]} {problems[:2]}")

        # 6. An open subscription ends when the server drains; it does not hold the exit up.
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        elapsed = time.monotonic() - start
        check("SIGTERM with a subscriber open exits 0 well within the grace",
              rc == 0 and elapsed < 15, f"rc={rc} after {elapsed:.1f}s")
        check("the event streams ended", sub.ended.wait(10) and late.ended.wait(10))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if failed:
            sys.stderr.write("".join(log[-30:]))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
