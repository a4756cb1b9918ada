"""Two `oxllm serve` replicas as a router sees them (run by scripts/server-tests.sh, which passes
BASE_URL MODEL OXLLM_BINARY MODEL_PATH; this file starts its own two servers with the binary).

Under load on replica A, the metrics the Gateway API Inference Extension's endpoint picker reads
(vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc) rise on A and
stay at zero on B, so a least-loaded pick goes to B. Draining A (SIGTERM, as a rolling update
does) turns A's /health to 503 at once and refuses new work with 503 while B stays 200; A's
streams, running and waiting, all finish whole with the official `openai` client; then A exits 0.

Prints one line per check and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

_, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
MAX_NUM_SEQS = 2
STREAMS = 5
MAX_TOKENS = 96
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


class Replica:
    def __init__(self, name):
        self.name = name
        self.proc = subprocess.Popen(
            [OXLLM, "serve", "--model", MODEL_PATH, "--port", "0", "--served-model-name", MODEL,
             "--threads", "1", "--max-num-seqs", str(MAX_NUM_SEQS),
             "--kv-cache-memory", str(32 << 20), "--shutdown-grace", "120"],
            stderr=subprocess.PIPE, text=True,
        )
        self.log = []
        self.url = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(180) or self.url is None:
            raise RuntimeError(f"replica {name} did not start: {''.join(self.log)}")
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=300)

    def status(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
            m = re.search(rf'^{re.escape(name)}{{model_name="{MODEL}"}} (\S+)$', text, re.M)
            out[name.split(":")[1]] = float(m.group(1)) if m else None
        return out


def least_loaded(replicas):
    """The endpoint picker's queue-then-KV preference, reduced to its order."""
    return min(replicas, key=lambda r: (r.metrics()["num_requests_waiting"], r.metrics()["kv_cache_usage_perc"]))


def main():
    a, b = Replica("A"), Replica("B")
    try:
        idle = a.metrics()
        check("idle metrics are zero", idle == {"num_requests_running": 0, "num_requests_waiting": 0,
                                                "kv_cache_usage_perc": 0}, idle)
        results = [None] * STREAMS

        def stream(i):
            try:
                text, finish = "", None
                for chunk in a.client.completions.create(
                    model=MODEL, prompt=f"List {i + 3} animals:", max_tokens=MAX_TOKENS,
                    temperature=0, stream=True, extra_body={"ignore_eos": True},
                ):
                    text += chunk.choices[0].text
                    finish = chunk.choices[0].finish_reason or finish
                results[i] = (finish, text)
            except Exception as e:  # noqa: BLE001 - reported as the result
                results[i] = ("error", repr(e))

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        loaded = a.metrics()
        while time.time() < deadline and not (loaded["num_requests_running"] == MAX_NUM_SEQS
                                              and loaded["num_requests_waiting"] >= 1):
            time.sleep(0.05)
            loaded = a.metrics()
        check("under load A reports running = max-num-seqs and waiting > 0",
              loaded["num_requests_running"] == MAX_NUM_SEQS and loaded["num_requests_waiting"] >= 1, loaded)
        check("under load A's KV usage rises within (0, 1]", 0 < loaded["kv_cache_usage_perc"] <= 1, loaded)
        other = b.metrics()
        check("B stays idle", other["num_requests_running"] == 0 and other["num_requests_waiting"] == 0, other)
        check("a least-loaded pick goes to B", least_loaded([a, b]) is b)

        a.proc.send_signal(signal.SIGTERM)
        start = time.time()
        while a.status("/health") == 200 and time.time() - start < 5:
            time.sleep(0.01)
        check("draining A answers /health 503 at once", a.status("/health") == 503 and time.time() - start < 5)
        check("B still answers /health 200", b.status("/health") == 200)
        try:
            a.client.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
            check("draining A refuses new requests with 503", False, "accepted")
        except openai.APIStatusError as e:
            check("draining A refuses new requests with 503", e.status_code == 503, e)
        r = b.client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, temperature=0)
        check("B serves while A drains", r.choices[0].finish_reason == "length", r)

        for t in threads:
            t.join(300)
        finished = [res for res in results if res and res[0] == "length" and res[1]]
        check(f"all {STREAMS} streams on A finish whole during the drain", len(finished) == STREAMS, results)
        try:
            rc = a.proc.wait(60)
        except subprocess.TimeoutExpired:
            rc = None
        check("A exits 0 after draining", rc == 0, f"rc={rc} log={''.join(a.log[-5:])}")
        check("A said what it drained", any("draining" in line and "Ctrl-C again" in line for line in a.log),
              "".join(a.log[-5:]))
    finally:
        for r in (a, b):
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
