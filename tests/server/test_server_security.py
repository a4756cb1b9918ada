"""Authentication and browser safety of `oxllm serve`, through the official `openai` client and
raw HTTP. Starts its own server (the flags differ from the shared one): an API key from the
OXLLM_API_KEY environment variable, --protect-metrics, and one CORS origin. Also checks the
shared server (BASE_URL, started without CORS) sends no CORS headers.

Usage: test_server_security.py BASE_URL MODEL OXLLM_BINARY MODEL_PATH
Prints one line per test and a closing 'N passed, N failed'; exits nonzero on any failure.
"""

import json
import os
import socket
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request

import openai

BASE_URL, MODEL, OXLLM, MODEL_PATH = sys.argv[1:5]
KEY = "sk-test-" + "x" * 24
ALLOWED = "http://allowed.example"
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(url, method="GET", body=None, headers=None):
    """(status, headers, parsed JSON body or text)."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, hdrs, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, e.headers, e.read()
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw.decode("utf-8", "replace")


PORT = free_port()
ROOT = f"http://127.0.0.1:{PORT}"
env = dict(os.environ, OXLLM_API_KEY=KEY)
server = subprocess.Popen(
    [OXLLM, "serve", "--model", MODEL_PATH, "--port", str(PORT), "--served-model-name", MODEL,
     "--max-num-seqs", "4", "--num-blocks", "64", "--threads", "1", "--protect-metrics",
     "--cors-allow-origin", ALLOWED],
    env=env, stderr=subprocess.PIPE, text=True,
)
for _ in range(240):
    try:
        if http(ROOT + "/health")[0] == 200:
            break
    except OSError:
        pass
    if server.poll() is not None:
        sys.exit("server exited early: " + server.stderr.read())
    time.sleep(0.5)
# The key never appears in the start-up output.
good = openai.OpenAI(base_url=ROOT + "/v1", api_key=KEY, max_retries=0, timeout=120)
bad = openai.OpenAI(base_url=ROOT + "/v1", api_key=KEY[:-1] + "y", max_retries=0, timeout=120)


@test
def right_key_works_and_models_show_no_path():
    models = good.models.list().data
    assert [m.id for m in models] == [MODEL], models
    status, _, body = http(ROOT + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200, body
    text = json.dumps(body)
    assert MODEL_PATH not in text and os.path.basename(MODEL_PATH) not in text, text
    r = good.completions.create(model=MODEL, prompt="Hi", max_tokens=2, temperature=0)
    assert r.choices[0].text is not None


@test
def wrong_or_missing_key_is_401_in_openai_shape():
    try:
        bad.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError as e:
        assert e.status_code == 401, e
        assert e.body["code"] == "invalid_api_key", e.body
    for path, method, body in [("/v1/models", "GET", None), ("/tokenize", "POST", b'{"prompt": "a"}'),
                               ("/v1/chat/completions", "POST", b'{"messages": []}')]:
        status, hdrs, err = http(ROOT + path, method, body, {"Content-Type": "application/json"})
        assert status == 401, (path, status, err)
        assert set(err["error"]) == {"message", "type", "param", "code"}, err
        status, _, _ = http(ROOT + path, method, body,
                            {"Content-Type": "application/json", "Authorization": "Basic " + KEY})
        assert status == 401, (path, status)


@test
def health_is_open_and_metrics_protected_by_flag():
    assert http(ROOT + "/health")[0] == 200
    assert http(ROOT + "/metrics")[0] == 401
    status, _, body = http(ROOT + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and "# TYPE" in body, str(body)[:200]
    # The shared server has no key: everything is open there.
    assert http(BASE_URL.rsplit("/v1", 1)[0] + "/metrics")[0] == 200


@test
def browser_simple_posts_are_refused():
    # What a cross-site form or fetch without preflight can send.
    for ctype in ["text/plain", "application/x-www-form-urlencoded", None]:
        headers = {"Authorization": f"Bearer {KEY}"}
        if ctype:
            headers["Content-Type"] = ctype
        body = b'{"prompt": "Hi", "max_tokens": 1}'
        status, _, err = http(ROOT + "/v1/completions", "POST", body, headers)
        assert status == 415, (ctype, status, err)
        assert err["error"]["code"] == "unsupported_media_type", err
    shared = BASE_URL.rsplit("/v1", 1)[0]
    status, _, err = http(shared + "/v1/completions", "POST", b'{"prompt": "Hi", "max_tokens": 1}',
                          {"Content-Type": "text/plain"})
    assert status == 415, (status, err)


@test
def cors_only_for_allowed_origins():
    pre = {"Origin": ALLOWED, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    status, hdrs, _ = http(ROOT + "/v1/chat/completions", "OPTIONS", None, pre)
    assert status == 204, status
    assert hdrs["Access-Control-Allow-Origin"] == ALLOWED, dict(hdrs)
    assert "authorization" in hdrs["Access-Control-Allow-Headers"], dict(hdrs)
    status, hdrs, _ = http(ROOT + "/v1/models", headers={"Origin": ALLOWED, "Authorization": f"Bearer {KEY}"})
    assert status == 200 and hdrs["Access-Control-Allow-Origin"] == ALLOWED, dict(hdrs)
    evil = dict(pre, Origin="http://evil.example")
    status, hdrs, _ = http(ROOT + "/v1/chat/completions", "OPTIONS", None, evil)
    assert "Access-Control-Allow-Origin" not in hdrs, dict(hdrs)
    # CORS is off by default: the shared server never sends the header.
    shared = BASE_URL.rsplit("/v1", 1)[0]
    status, hdrs, _ = http(shared + "/v1/chat/completions", "OPTIONS", None, pre)
    assert "Access-Control-Allow-Origin" not in hdrs, dict(hdrs)
    status, hdrs, _ = http(shared + "/v1/models", headers={"Origin": ALLOWED})
    assert status == 200 and "Access-Control-Allow-Origin" not in hdrs, dict(hdrs)


passed = failed = 0
try:
    for t in TESTS:
        try:
            t()
            print(f"ok   {t.__name__}")
            passed += 1
        except Exception:
            print(f"FAIL {t.__name__}")
            traceback.print_exc()
            failed += 1
finally:
    server.terminate()
    try:
        _, err = server.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        _, err = server.communicate()
    if KEY in err:
        print("FAIL the API key appears in the server's output")
        failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
