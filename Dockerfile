# oxllm serve in a container: a build stage compiles the release binary, a slim runtime stage
# runs it as an unprivileged user. The model is not in the image: mount a volume at
# /var/cache/oxllm (the default model lives at models/SmolLM2-135M-Instruct.Q4_1.gguf in it,
# fetched once by the init step in docs/DEPLOY.md) or pass --model with another path.
# scripts/check-image.sh lints this file and runs its steps where no container runtime exists.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
# No debug info in the shipped binary (the release profile keeps some for profiling). The
# kernels pick AVX2/AVX-512 at run time, so a generic x86-64 build is fast on every host.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true
RUN cargo build --release --locked --bin oxllm && cp target/release/oxllm oxllm

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
RUN useradd --system --uid 10001 --home-dir /var/cache/oxllm --create-home oxllm
COPY --from=build /src/oxllm /usr/local/bin/oxllm
ENV OXLLM_CACHE=/var/cache/oxllm
VOLUME ["/var/cache/oxllm"]
USER 10001
EXPOSE 8000
# bash's /dev/tcp keeps the image free of curl: healthy while /health answers 200 (503 while
# draining after SIGTERM, so the container shows unhealthy during a stop).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
# docker stop sends SIGTERM and waits 10 s by default: give it --time 35 for the 30 s grace.
STOPSIGNAL SIGTERM
ENTRYPOINT ["oxllm"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "smollm2"]
