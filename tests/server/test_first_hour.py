"""What a new user sees of `oxllm serve`, through the official openai client and a real browser.

Run by scripts/server-tests.sh as `python test_first_hour.py BASE_URL MODEL OXLLM_BINARY
MODEL_PATH`. It starts its own server (the binary and model given) to read its stderr:

- unseeded sampled requests differ, seeded ones repeat;
- one log line per request, naming the response id, the HTTP status, the prompt and
  completion tokens the response reported, the time to first token and the total time;
- the chat page at GET / in headless Chromium (Debian's `chromium`): type a message, press
  Enter, read the streamed answer, which must be the API's greedy answer to the same
  conversation; the token counts and speed shown; the stop button ending a long answer.
  Without chromium the browser test is skipped with a loud message (install: apt-get install
  -y chromium).
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402

QUESTION = "What is the capital of France?"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, binary, model_path):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="oxllm-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [binary, "serve", "--model", model_path, "--port", str(self.port),
             "--served-model-name", "first-hour", "--kv-cache-memory", "128MiB",
             "--max-num-seqs", "8"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(240):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2)
                return
            except Exception:
                if self.proc.poll() is not None:
                    raise RuntimeError("server exited early:\n" + self.stderr())
                time.sleep(0.5)
        raise RuntimeError("server did not become healthy:\n" + self.stderr())

    def stderr(self):
        with open(self.log.name) as f:
            return f.read()

    def request_lines(self):
        """Every request log line so far, oldest first."""
        return [l for l in self.stderr().splitlines() if l.startswith("oxllm serve: request ")]

    def line_for(self, needle, timeout=10):
        """The request log line containing `needle` (it is written when the request is over)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in self.stderr().splitlines():
                if line.startswith("oxllm serve: request ") and needle in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no request line with {needle!r} in:\n{self.stderr()}")

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.unlink(self.log.name)


def field(line, name):
    m = re.search(rf" {name}=([^ ]+)", line)
    assert m, f"no {name} in {line!r}"
    return m.group(1)


def test_request_log_lines(server, client):
    r = client.chat.completions.create(
        model="first-hour", messages=[{"role": "user", "content": QUESTION}],
        max_tokens=8, temperature=0)
    line = server.line_for(r.id)
    assert " POST /v1/chat/completions 200 " in line, line
    assert int(field(line, "prompt_tokens")) == r.usage.prompt_tokens, line
    assert int(field(line, "completion_tokens")) == r.usage.completion_tokens, line
    ttft, total = float(field(line, "ttft_ms")), float(field(line, "total_ms"))
    assert 0 < ttft <= total, line
    assert field(line, "finish") == r.choices[0].finish_reason, line

    # A streamed completion is logged once its stream has ended, with the usage it reported.
    stream = client.completions.create(
        model="first-hour", prompt="The capital of France is", max_tokens=6, temperature=0,
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    usage = chunks[-1].usage
    line = server.line_for(chunks[0].id)
    assert " POST /v1/completions 200 " in line, line
    assert int(field(line, "completion_tokens")) == usage.completion_tokens == 6, line
    assert int(field(line, "prompt_tokens")) == usage.prompt_tokens, line

    # A rejected request gets its line too, with its status.
    before = server.stderr().count(" 400 ")
    try:
        client.completions.create(model="first-hour", prompt="x", max_tokens=-1)
        raise AssertionError("max_tokens=-1 was accepted")
    except openai.BadRequestError:
        pass
    deadline = time.time() + 10
    while server.stderr().count("POST /v1/completions 400 ") <= before and time.time() < deadline:
        time.sleep(0.05)
    assert "POST /v1/completions 400 " in server.stderr()
    # Probes stay out of the log.
    urllib.request.urlopen(server.url + "/health")
    time.sleep(0.2)
    assert "GET /health" not in server.stderr()


def test_unseeded_sampling_differs_and_seeds_repeat(server, client):
    def ask(**extra):
        r = client.chat.completions.create(
            model="first-hour", messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=16, temperature=1, **extra)
        return r.choices[0].message.content
    assert ask() != ask(), "two unseeded sampled requests gave the same answer"
    assert ask(seed=11) == ask(seed=11)


def test_chat_page_is_served(server):
    with urllib.request.urlopen(server.url + "/") as r:
        assert r.headers["Content-Type"].startswith("text/html"), r.headers
        page = r.read().decode()
    assert "<title>oxllm chat</title>" in page and 'src="/chat.js"' in page
    with urllib.request.urlopen(server.url + "/chat.js") as r:
        assert "javascript" in r.headers["Content-Type"]
        assert "/v1/chat/completions" in r.read().decode()


def test_chat_page_in_a_browser(server, client):
    binary = cdp.find_chromium()
    if binary is None:
        print("!" * 78 + "\n!! SKIPPED: chat page browser test: chromium is not installed"
              " (apt-get install -y chromium)\n" + "!" * 78, file=sys.stderr)
        return
    browser = cdp.Browser(binary)
    try:
        browser.call("Page.navigate", url=server.url + "/")
        browser.wait_for("document.getElementById('model').textContent === 'first-hour'",
                         what="the model name on the page")
        browser.eval("document.getElementById('max_tokens').value = '12'")
        browser.eval("document.getElementById('prompt').focus()")
        browser.type_text(QUESTION)
        browser.press_enter()
        browser.wait_for(
            "(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();"
            " return m && m.dataset.state === 'done'; })()", what="the streamed answer")
        shown = browser.eval("[...document.querySelectorAll('.msg.assistant')].pop().textContent")
        user = browser.eval("[...document.querySelectorAll('.msg.user')].pop().textContent")
        stats = browser.eval("document.getElementById('stats').textContent")
        assert user == QUESTION, user
        # Greedy decoding of the same conversation through the API gives the same text.
        want = client.chat.completions.create(
            model="first-hour", messages=[{"role": "user", "content": QUESTION}],
            max_tokens=12, temperature=0)
        assert shown == want.choices[0].message.content, (shown, want.choices[0].message.content)
        assert f"{want.usage.prompt_tokens} prompt + {want.usage.completion_tokens} completion tokens" in stats, stats
        assert "tokens/s" in stats and "first token after" in stats, stats

        # Stop: a long answer ends when the button is pressed, and the page takes input again.
        # The answer is sampled (temperature 1, unseeded), so now and then it ends on its own
        # before the click lands (the request then finishes with `stop`): ask again, up to 5
        # times, until the click is what ended it.
        browser.eval("document.getElementById('max_tokens').value = '2000'")
        browser.eval("document.getElementById('temperature').value = '1'")
        endings = []
        for _ in range(5):
            seen = len(server.request_lines())
            browser.eval("document.getElementById('prompt').focus()")
            browser.type_text("Tell me a very long story about a dragon.")
            browser.press_enter()
            browser.wait_for(
                "(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();"
                " return m.dataset.state === 'streaming' && m.textContent.length > 0; })()",
                what="the long answer to start")
            browser.eval("document.getElementById('stop').click()")
            browser.wait_for(
                "(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();"
                " return ['stopped', 'done'].includes(m.dataset.state)"
                " && !document.getElementById('send').disabled; })()",
                timeout=20, what="the stop")
            deadline = time.time() + 20
            while len(server.request_lines()) <= seen and time.time() < deadline:
                time.sleep(0.05)
            assert len(server.request_lines()) > seen, server.stderr()
            line = server.request_lines()[seen]
            endings.append(field(line, "finish"))
            if field(line, "finish") == "abort":
                # The server saw the client go and ended the request early.
                assert 0 < int(field(line, "completion_tokens")) < 2000, line
                state = browser.eval("[...document.querySelectorAll('.msg.assistant')].pop().dataset.state")
                assert state == "stopped", state
                break
        else:
            raise AssertionError(f"the stop button never ended an answer: finishes {endings}")
    finally:
        browser.close()


def main():
    base_url, _model, binary, model_path = sys.argv[1:5]
    server = Server(binary, model_path)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        for test in (test_request_log_lines, test_unseeded_sampling_differs_and_seeds_repeat):
            test(server, client)
            print(f"ok {test.__name__}")
        test_chat_page_is_served(server)
        print("ok test_chat_page_is_served")
        test_chat_page_in_a_browser(server, client)
        print("ok test_chat_page_in_a_browser")
    finally:
        server.close()


if __name__ == "__main__":
    main()
