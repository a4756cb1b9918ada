//! Servers for the tests: each runs in-process on a free loopback port, on its own tokio
//! runtime thread, over its own engine. One shared SmolLM2 server serves most tests; tests
//! that need other settings start their own. Tests take [`serial`] so that block accounting
//! and timing are not disturbed by each other.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use oxllm_engine::{EngineConfig, EngineHandle, KvCacheSize};
use oxllm_server::{AppState, ServerConfig};

pub const MODEL: &str = "smollm2";

pub fn smollm2() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let p = std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/oxllm"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} missing: run scripts/fetch-model.sh",
        p.display()
    );
    p
}

pub fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/llama-f32")
}

pub fn engine_config() -> EngineConfig {
    EngineConfig {
        max_num_seqs: 64,
        max_num_batched_tokens: 512,
        kv_cache: KvCacheSize::Blocks(2048),
        threads: 2,
        ..EngineConfig::default()
    }
}

pub fn server_config() -> ServerConfig {
    ServerConfig {
        served_model_name: MODEL.into(),
        model_path: "test".into(),
        max_waiting: 1024,
        max_body_bytes: 1 << 20,
        shutdown_grace: Duration::from_secs(30),
        ..ServerConfig::default()
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub engine: EngineHandle,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    pub fn start(model: PathBuf, engine: EngineConfig, server: ServerConfig) -> TestServer {
        let (engine, tokenizer) = oxllm_server::start_engine(&model, engine).expect("engine");
        let handle = engine.handle();
        let state = AppState::new(handle.clone(), tokenizer, server);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let stop = async move {
                    let _ = rx.await;
                };
                oxllm_server::serve(listener, state, stop)
                    .await
                    .expect("serve");
            });
            drop(rt);
            engine.shutdown();
        });
        TestServer {
            addr,
            engine: handle,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// Sends the shutdown signal without waiting.
    pub fn signal_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Signals shutdown and waits for the server thread to finish.
    pub fn stop(mut self) {
        self.signal_shutdown();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
    }
}

/// The shared SmolLM2 server (started on first use, never stopped).
pub fn shared() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| TestServer::start(smollm2(), engine_config(), server_config()))
}

/// Serializes the tests of this binary.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits (up to a minute) until the engine has no request and no block in use.
pub fn wait_for_no_blocks(server: &TestServer) {
    let start = Instant::now();
    loop {
        let s = server.engine.stats();
        if s.num_blocks_used() == 0 && s.num_running == 0 && s.num_waiting == 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "blocks still in use: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
