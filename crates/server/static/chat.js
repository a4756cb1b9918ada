// oxllm's chat page: keeps the conversation in the page, sends it to /v1/chat/completions with
// "stream": true, and shows the answer as its SSE chunks arrive, then the token counts (from the
// final usage chunk) and the speed (time to first token, tokens per second after it).
"use strict";

const $ = (id) => document.getElementById(id);
const messages = [];
let model = null;
let running = null; // the AbortController of the request in flight

function add(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

// The server's --api-key, if it has one: typed once, kept in this browser.
function headers(extra) {
  const key = $("api_key").value.trim();
  return key ? { ...extra, Authorization: "Bearer " + key } : extra;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers({}) });
    const body = await r.json();
    if (!r.ok) throw new Error((body.error && body.error.message) || r.status);
    model = body.data[0].id;
    $("model").textContent = model;
  } catch (e) {
    $("model").textContent = "unavailable (" + e + ")";
  }
}

function sampling() {
  const body = {
    temperature: Number($("temperature").value),
    top_p: Number($("top_p").value),
    max_tokens: Number($("max_tokens").value),
  };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  return body;
}

// Yields the JSON payload of each `data:` event of an SSE response body.
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

async function send(text) {
  messages.push({ role: "user", content: text });
  add("user", text);
  const out = add("assistant", "");
  out.dataset.state = "streaming";
  const system = $("system").value.trim();
  const convo = system ? [{ role: "system", content: system }, ...messages] : messages;
  running = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  $("stats").textContent = "waiting for the first token…";
  const start = performance.now();
  let first = null;
  let usage = null;
  let answer = "";
  let finish = null;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify({ model, messages: convo, stream: true,
                             stream_options: { include_usage: true }, ...sampling() }),
      signal: running.signal,
    });
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      throw new Error((body.error && body.error.message) || r.status + " " + r.statusText);
    }
    for await (const chunk of events(r)) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        const delta = (choice.delta && choice.delta.content) || "";
        if (delta) {
          if (first === null) first = performance.now();
          answer += delta;
          out.textContent = answer;
          $("log").scrollTop = $("log").scrollHeight;
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    out.dataset.state = "done";
  } catch (e) {
    if (e.name === "AbortError") {
      out.dataset.state = "stopped";
      finish = "stopped";
    } else {
      out.dataset.state = "error";
      out.className = "msg error";
      out.textContent = "error: " + e.message;
    }
  } finally {
    running = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
  if (answer) messages.push({ role: "assistant", content: answer });
  else if (out.dataset.state !== "error") messages.pop();
  const end = performance.now();
  const parts = [];
  if (usage) parts.push(`${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens`);
  if (first !== null) {
    parts.push(`first token after ${((first - start) / 1000).toFixed(2)} s`);
    const n = usage ? usage.completion_tokens : null;
    if (n && n > 1 && end > first) parts.push(`${((n - 1) / ((end - first) / 1000)).toFixed(1)} tokens/s`);
  }
  if (finish) parts.push(`finish: ${finish}`);
  $("stats").textContent = parts.join(" · ");
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || running) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => running && running.abort());
$("clear").addEventListener("click", () => {
  if (running) running.abort();
  messages.length = 0;
  $("log").textContent = "";
  $("stats").textContent = "";
});
$("api_key").value = localStorage.getItem("oxllm_api_key") || "";
$("api_key").addEventListener("change", () => {
  localStorage.setItem("oxllm_api_key", $("api_key").value.trim());
  loadModel();
});
loadModel();
