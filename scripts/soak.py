"""Soak test of `oxllm serve` (driven by scripts/soak.sh): a bounded mixed load against one
server, then checks that it is back to rest.

Load, for DURATION seconds from WORKERS threads: whole and streamed completions and chats,
streams dropped mid-way (random disconnects), malformed requests (bad JSON, wrong types,
unknown fields, trailing garbage, wrong content type), and overload bursts (more requests at
once than running + waiting slots). Asserts:
  * no 5xx except 503 (overload, with Retry-After), and no connection error but our own drops;
  * afterwards running, waiting and in-flight counts and KV blocks in use are back to 0;
  * the server's RSS grew by less than RSS_LIMIT_MIB over the load;
  * greedy outputs during the load equal those of a quiet run before it.

Usage: soak.py ROOT_URL MODEL SERVER_PID DURATION_S
"""

import http.client
import json
import random
import re
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT, MODEL, PID, DURATION = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
HOST, PORT = ROOT.split("//")[1].split(":")
PORT = int(PORT)
WORKERS = 6
RSS_LIMIT_MIB = 200
GREEDY = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
]

failures = []
lock = threading.Lock()
counts = {}


def fail(msg):
    with lock:
        failures.append(msg)


def count(key):
    with lock:
        counts[key] = counts.get(key, 0) + 1


def post(path, body, ctype="application/json", timeout=300):
    """(status, headers, bytes) of one POST on its own connection."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    try:
        conn.request("POST", path, raw, {"Content-Type": ctype})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def check_status(status, headers, data, what):
    count(status)
    if status >= 500 and status != 503:
        fail(f"{what}: {status} {data[:300]!r}")
    if status == 503 and "retry-after" not in headers:
        fail(f"{what}: 503 without Retry-After")


def greedy(prompt):
    status, headers, data = post("/v1/completions", {
        "model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0})
    if status != 200:
        return None, status
    return json.loads(data)["choices"][0]["text"], status


def rss_mib():
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def metric(text, suffix):
    m = re.search(r"^(?:oxllm_|vllm:)" + re.escape(suffix) + r"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


BAD = [
    (b'{"prompt": "x", "max_tokens": 2} trailing', "application/json"),
    (b'{"prompt": ', "application/json"),
    (b'{"prompt": "x", "temperature": "hot"}', "application/json"),
    (b'{"prompt": "x", "bogus_field": 1}', "application/json"),
    (b'{"prompt": "x"}', "text/plain"),
    (b'{"prompt": "\xff\xfe"}', "application/json"),
    (json.dumps({"prompt": "x", "stop": ["a"] * 1000}).encode(), "application/json"),
    (json.dumps({"prompt": [99999999]}).encode(), "application/json"),
    (json.dumps({"prompt": "x", "max_tokens": 10 ** 9}).encode(), "application/json"),
]


def one_request(rng, quiet):
    kind = rng.choice(["whole", "chat", "stream", "drop", "bad", "greedy"])
    try:
        if kind == "whole":
            s, h, d = post("/v1/completions", {"model": MODEL, "prompt": "Tell me about cats.",
                                               "max_tokens": rng.randint(1, 32), "n": rng.randint(1, 3)})
            check_status(s, h, d, kind)
        elif kind == "chat":
            s, h, d = post("/v1/chat/completions", {"model": MODEL, "max_tokens": rng.randint(1, 32),
                           "messages": [{"role": "user", "content": "Say something."}]})
            check_status(s, h, d, kind)
        elif kind in ("stream", "drop"):
            conn = http.client.HTTPConnection(HOST, PORT, timeout=300)
            body = {"model": MODEL, "prompt": "Write a story.", "max_tokens": 48, "stream": True}
            conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            count(r.status)
            if r.status != 200:
                check_status(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read(), kind)
            elif kind == "drop":
                r.read(rng.randint(1, 200))
                conn.sock.close()  # disconnect mid-stream
            else:
                data = r.read().decode()
                if not data.rstrip().endswith("data: [DONE]"):
                    fail(f"stream did not end with [DONE]: {data[-200:]!r}")
            conn.close()
        elif kind == "bad":
            raw, ctype = rng.choice(BAD)
            s, h, d = post("/v1/completions", raw, ctype)
            check_status(s, h, d, kind)
            if s not in (400, 413, 415, 503):
                fail(f"bad request answered {s}: {raw[:80]!r} -> {d[:200]!r}")
        else:
            i = rng.randrange(len(GREEDY))
            text, s = greedy(GREEDY[i])
            if text is not None and text != quiet[i]:
                fail(f"greedy output changed under load: {GREEDY[i]!r}: {text!r} != {quiet[i]!r}")
            elif s != 200 and s != 503:
                fail(f"greedy request answered {s}")
    except (OSError, http.client.HTTPException) as e:
        fail(f"{kind}: connection error {e!r}")


def burst(quiet):
    """More requests at once than the server holds: some must get 503, none a 5xx."""
    threads = [threading.Thread(target=lambda: (lambda s, h, d: check_status(s, h, d, "burst"))(
        *post("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 8})))
        for _ in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    quiet = []
    for p in GREEDY:
        text, s = greedy(p)
        assert s == 200, f"quiet run failed: {s}"
        quiet.append(text)
    rss_before = rss_mib()
    deadline = time.time() + DURATION

    def worker(seed):
        rng = random.Random(seed)
        while time.time() < deadline:
            one_request(rng, quiet)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    while time.time() < deadline:
        time.sleep(min(15, max(0, deadline - time.time())))
        if time.time() < deadline:
            burst(quiet)
    for t in threads:
        t.join()
    # Back to rest: nothing running, waiting or in flight, no KV block held.
    rest = None
    for _ in range(120):
        with urllib.request.urlopen(ROOT + "/metrics", timeout=30) as r:
            text = r.read().decode()
        values = {k: metric(text, k) for k in
                  ["num_requests_running", "num_requests_waiting", "num_requests_in_flight",
                   "kv_blocks_in_use"]}
        if all(v == 0 for v in values.values() if v is not None):
            rest = values
            break
        time.sleep(0.5)
    if rest is None:
        fail(f"not back to rest after the load: {values}")
    elif rest.get("num_requests_running") is None or rest.get("kv_blocks_in_use") is None:
        fail(f"metrics missing: {values}")
    rss_after = rss_mib()
    if rss_after - rss_before > RSS_LIMIT_MIB:
        fail(f"RSS grew from {rss_before:.0f} to {rss_after:.0f} MiB")
    for i, p in enumerate(GREEDY):
        text, s = greedy(p)
        if text != quiet[i]:
            fail(f"greedy output after the load differs: {p!r}")
    print(f"soak: {DURATION:.0f} s, statuses {dict(sorted(counts.items()))}, "
          f"RSS {rss_before:.0f} -> {rss_after:.0f} MiB")
    if counts.get(503, 0) == 0:
        print("soak: note: no 503 seen (no burst overflowed the queue)")
    if failures:
        for f in failures[:20]:
            print("FAIL", f)
        print(f"soak: {len(failures)} failures")
        sys.exit(1)
    print("soak: ok")


main()
