"""Reads the repository's Dockerfile well enough to run its steps without a container runtime
(scripts/check-image.sh): the build context as .dockerignore leaves it, the build stage's COPY
and RUN steps, and the runtime stage's ENV, ENTRYPOINT + CMD and HEALTHCHECK (exec forms).

Usage:
  dockerfile.py context DOCKERFILE DOCKERIGNORE DEST   copy the build stage's COPY sources
  dockerfile.py run-build DOCKERFILE DIR               run the build stage's RUN steps in DIR
  dockerfile.py command DOCKERFILE PORT                ENTRYPOINT + CMD, one word a line
  dockerfile.py healthcheck DOCKERFILE PORT            HEALTHCHECK CMD, one word a line
  dockerfile.py env DOCKERFILE NAME                    the runtime stage's ENV value
(PORT replaces the image's 8000.)
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys


def instructions(path):
    """[(stage index, INSTRUCTION, rest)] with continuation lines joined."""
    out, stage, buf = [], -1, ""
    for raw in open(path):
        line = raw.rstrip("\n")
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        line, buf = buf + line, ""
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            stage += 1
        out.append((stage, word, rest.strip()))
    return out


def stage_of(ins, which):
    last = max(s for s, _, _ in ins)
    index = 0 if which == "build" else last
    return [(w, r) for s, w, r in ins if s == index]


def env_of(steps):
    env = {}
    for w, r in steps:
        if w == "ENV":
            for pair in shlex.split(r):
                k, _, v = pair.partition("=")
                env[k] = v
    return env


def ignore_regex(pattern):
    pattern = pattern.strip().rstrip("/")
    rx = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            rx += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            rx += ".*"
            i += 2
        elif pattern[i] == "*":
            rx += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            rx += "[^/]"
            i += 1
        else:
            rx += re.escape(pattern[i])
            i += 1
    return re.compile(rx + "$")


def context_files(dockerignore):
    rules = []
    for line in open(dockerignore):
        line = line.strip()
        if line and not line.startswith("#"):
            neg = line.startswith("!")
            rules.append((neg, ignore_regex(line.lstrip("!"))))
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True, text=True,
    ).stdout.split("\n")
    kept = []
    for f in filter(None, listed):
        if not os.path.exists(f):
            continue
        parts = f.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for neg, rx in rules:
            if any(rx.match(p) for p in prefixes):
                excluded = not neg
        if not excluded:
            kept.append(f)
    return kept


def main():
    cmd, dockerfile = sys.argv[1], sys.argv[2]
    ins = instructions(dockerfile)
    if cmd == "context":
        dockerignore, dest = sys.argv[3], sys.argv[4]
        files = context_files(dockerignore)
        for w, r in stage_of(ins, "build"):
            if w != "COPY" or r.startswith("--from"):
                continue
            *sources, target = shlex.split(r)
            for src in sources:
                picked = [f for f in files if f == src or f.startswith(src.rstrip("/") + "/")]
                if not picked:
                    sys.exit(f"COPY {src}: not in the build context (.dockerignore excludes it?)")
                for f in picked:
                    rel = f if target.endswith("/") or target == "./" else target + f[len(src):]
                    to = os.path.join(dest, os.path.normpath(rel))
                    os.makedirs(os.path.dirname(to), exist_ok=True)
                    shutil.copy2(f, to)
    elif cmd == "run-build":
        where = sys.argv[3]
        steps = stage_of(ins, "build")
        env = dict(os.environ, **env_of(steps))
        for w, r in steps:
            if w == "RUN":
                print(f"RUN {r}", file=sys.stderr)
                subprocess.run(["sh", "-c", r], cwd=where, env=env, check=True)
    elif cmd in ("command", "healthcheck"):
        port = sys.argv[3]
        steps = stage_of(ins, "runtime")
        if cmd == "command":
            entry = next((json.loads(r) for w, r in steps if w == "ENTRYPOINT"), [])
            words = entry + next((json.loads(r) for w, r in steps if w == "CMD"), [])
        else:
            spec = next(r for w, r in steps if w == "HEALTHCHECK")
            words = json.loads(spec[spec.index("CMD") + 3:].strip())
        for word in words:
            print(word.replace("8000", port))
    elif cmd == "env":
        print(env_of(stage_of(ins, "runtime")).get(sys.argv[3], ""))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
