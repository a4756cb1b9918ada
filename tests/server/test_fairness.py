"""Fair scheduling through the API (issue 20, starvation): one request with many long choices
must not starve a small request from another client.

Starts its own `oxllm serve` with 4 running slots, sends a streaming completion with n=16 and
max_tokens=1500 (`ignore_eos`), waits until it streams, then sends a 4-token completion from a
second client: it must be answered within 30 s. First come, first served, it would wait
until twelve of the big request's choices had finished 1500 tokens each (minutes on this
machine); with the fair share it is admitted at the next step. Also checks that the big
request's choices still run on every slot once the small one is done.

Usage: test_fairness.py BASE_URL MODEL OXLLM_BINARY MODEL_PATH (BASE_URL and MODEL unused)
Prints one line per test and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

import openai

OXLLM, MODEL_PATH = sys.argv[3:5]
NAME = "fair"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server():
    port = free_port()
    proc = subprocess.Popen(
        [OXLLM, "serve", "--model", MODEL_PATH, "--port", str(port), "--served-model-name", NAME,
         "--max-num-seqs", "4", "--max-model-len", "2048", "--kv-cache-memory", str(256 << 20)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        if proc.poll() is not None:
            raise RuntimeError("server exited: " + proc.stderr.read().decode(errors="replace"))
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url + "/v1"
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server not ready after 120 s")


def running_and_waiting(base):
    """(running, waiting) from the Prometheus metrics."""
    text = urllib.request.urlopen(base[: -len("/v1")] + "/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        key, value = line.rsplit(" ", 1)
        values[key.split("{")[0]] = float(value)
    running = next((v for k, v in values.items() if k.endswith("num_requests_running")), None)
    waiting = next((v for k, v in values.items() if k.endswith("num_requests_waiting")), None)
    return running, waiting


def small_request_is_answered_while_a_many_choice_request_runs(base):
    big_client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600)
    stream = big_client.completions.create(
        model=NAME, prompt="Once upon a time", n=16, max_tokens=1500, temperature=0.8, seed=1,
        stream=True, extra_body={"ignore_eos": True},
    )
    chunks = {"n": 0}
    done = threading.Event()

    def read_big():
        try:
            for _ in stream:
                chunks["n"] += 1
                if done.is_set():
                    break
        except Exception:
            pass

    reader = threading.Thread(target=read_big, daemon=True)
    reader.start()
    deadline = time.time() + 120
    while chunks["n"] < 8 and time.time() < deadline:
        time.sleep(0.05)
    assert chunks["n"] >= 8, "the big request never streamed"
    running, waiting = running_and_waiting(base)
    if running is not None:
        assert running == 4 and waiting == 12, (running, waiting)

    small_client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
    t0 = time.time()
    r = small_client.completions.create(
        model=NAME, prompt="The capital of France is", max_tokens=4, temperature=0,
        extra_body={"ignore_eos": True},
    )
    elapsed = time.time() - t0
    assert r.usage.completion_tokens == 4, r.usage
    assert elapsed < 30, elapsed
    # The small request is done: the big one takes every slot again.
    time.sleep(1.0)
    running, waiting = running_and_waiting(base)
    if running is not None:
        assert running == 4, (running, waiting)
    before = chunks["n"]
    time.sleep(1.0)
    assert chunks["n"] > before, "the big request stopped streaming"
    done.set()
    stream.response.close()
    print(f"     small request answered in {elapsed:.2f} s beside n=16 x 1500 tokens", flush=True)


def main():
    proc, base = start_server()
    passed = failed = 0
    try:
        for fn in [small_request_is_answered_while_a_many_choice_request_runs]:
            try:
                fn(base)
                passed += 1
                print(f"ok   {fn.__name__}", flush=True)
            except Exception:
                failed += 1
                print(f"FAIL {fn.__name__}\n{traceback.format_exc()}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
