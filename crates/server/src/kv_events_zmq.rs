//! KV-cache events on a ZeroMQ PUB socket in vLLM's wire format, for routers that subscribe to
//! vLLM unchanged (llm-d's KV-cache indexer, Dynamo's ZMQ listener).
//!
//! Configured like vLLM, with `--kv-events-config '<KVEventsConfig JSON>'`. Each engine batch
//! goes out as one three-frame message: the topic, the sequence number as 8 big-endian bytes,
//! and the batch as MessagePack: `[ts, [event, ...]]`, each event an array tagged by its name:
//! `["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium]`,
//! `["BlockRemoved", hashes, medium]`, `["AllBlocksCleared"]`. Hashes are the 16 bytes of the
//! documented block hash (MessagePack `bin`; vLLM sends its SHA-256 hashes as bytes too).
//!
//! Guarantees: publishing never waits on a subscriber or slows the engine (the socket drops
//! what a slow or absent peer cannot take, and a publisher that falls behind the engine's
//! event ring skips the lost batches and advances the sequence by as many, so subscribers see
//! the gap); every peer that connects (or that the publisher connects to) is followed, shortly
//! after, by a snapshot batch (`AllBlocksCleared`, then every cached block), so a subscriber
//! mirrors the whole cache without vLLM's replay socket; a bad config or an endpoint that
//! cannot be bound is an error at start-up.

use std::time::Duration;

use axum::body::Bytes;
use futures_util::{Stream, StreamExt};
use oxllm_engine::{BlockHash, KvEvent, KvEventBatch};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use zeromq::{PubSocket, Socket, SocketEvent, SocketSend, ZmqMessage};

use crate::state::AppState;

/// Where the blocks live (vLLM's `medium`): host memory.
const MEDIUM: &str = "CPU";
/// How long after a peer appears its snapshot is sent: its subscription travels after the
/// connection itself, and a PUB socket drops what no subscription matches.
const SNAPSHOT_DELAY: Duration = Duration::from_millis(200);
/// How often an idle publisher checks whether the server drains.
const DRAIN_POLL: Duration = Duration::from_millis(250);

/// A ZMQ publisher's settings, from `--kv-events-config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZmqEventsConfig {
    /// The endpoint as given (for messages).
    pub endpoint: String,
    /// The address the socket binds or connects to.
    address: String,
    /// Bind (a wildcard host, as vLLM decides) or connect (a named host: the subscriber binds,
    /// as llm-d's indexer does).
    pub bind: bool,
    /// The first frame of every message (llm-d expects `kv@<pod>@<model>`).
    pub topic: String,
}

/// Why `--kv-events-config` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ZmqConfigError {
    #[error("--kv-events-config is not a KVEventsConfig JSON object: {0}")]
    Json(String),
    #[error("--kv-events-config: `publisher` must be \"zmq\" or \"null\", got {0:?}")]
    Publisher(String),
    #[error(
        "--kv-events-config: `endpoint` must be tcp://HOST:PORT (only TCP is supported), got {0:?}"
    )]
    Endpoint(String),
    #[error("--kv-events-config: `replay_endpoint` is not supported: a subscriber gets a snapshot of the whole cache when it connects instead")]
    Replay,
}

/// Why the publisher could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot publish KV-cache events on {endpoint}: {source}")]
pub struct ZmqStartError {
    endpoint: String,
    #[source]
    source: zeromq::ZmqError,
}

/// vLLM's `KVEventsConfig` fields; the queue and buffer sizes are accepted for compatibility
/// and unused (the engine's event ring bounds what is kept).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvEventsConfigJson {
    #[serde(default)]
    enable_kv_cache_events: bool,
    #[serde(default)]
    publisher: Option<String>,
    #[serde(default = "default_endpoint")]
    endpoint: String,
    #[serde(default)]
    replay_endpoint: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    buffer_steps: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    hwm: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    max_queue_size: Option<u64>,
    #[serde(default)]
    topic: String,
}

fn default_endpoint() -> String {
    "tcp://*:5557".into()
}

/// Parses `--kv-events-config`; `None` when events are off (`enable_kv_cache_events` false or
/// publisher `"null"`). As in vLLM, enabling events without naming a publisher means ZMQ.
pub fn parse_config(json: &str) -> Result<Option<ZmqEventsConfig>, ZmqConfigError> {
    let c: KvEventsConfigJson =
        serde_json::from_str(json).map_err(|e| ZmqConfigError::Json(e.to_string()))?;
    match c.publisher.as_deref() {
        None | Some("zmq") => {}
        Some("null") => return Ok(None),
        Some(other) => return Err(ZmqConfigError::Publisher(other.into())),
    }
    if !c.enable_kv_cache_events {
        return Ok(None);
    }
    if c.replay_endpoint.is_some() {
        return Err(ZmqConfigError::Replay);
    }
    let bad = || ZmqConfigError::Endpoint(c.endpoint.clone());
    let rest = c.endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    // vLLM binds when the host is a wildcard and connects otherwise.
    let bind = host == "*" || host.contains("::");
    let host = match host {
        "*" => "0.0.0.0",
        h => h,
    };
    Ok(Some(ZmqEventsConfig {
        endpoint: c.endpoint.clone(),
        address: format!("tcp://{host}:{port}"),
        bind,
        topic: c.topic,
    }))
}

/// Why a batch could not be encoded (writing to memory cannot fail; kept typed anyway).
pub type EncodeError = rmp::encode::ValueWriteError<std::io::Error>;

/// One batch as vLLM's `KVEventBatch` MessagePack.
pub fn encode_batch(batch: &KvEventBatch) -> Result<Vec<u8>, EncodeError> {
    use rmp::encode::{write_array_len, write_f64, write_str, write_uint};
    let mut out = Vec::with_capacity(64);
    let w = &mut out;
    write_array_len(w, 2)?;
    write_f64(w, batch.ts)?;
    write_array_len(w, batch.events.len() as u32)?;
    for e in &batch.events {
        match e {
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                extra: _,
            } => {
                write_array_len(w, 7)?;
                write_str(w, "BlockStored")?;
                write_hashes(w, block_hashes)?;
                match parent_block_hash {
                    Some(h) => write_hash(w, *h)?,
                    None => write_nil(w)?,
                }
                write_array_len(w, token_ids.len() as u32)?;
                for &t in token_ids {
                    write_uint(w, u64::from(t))?;
                }
                write_uint(w, *block_size as u64)?;
                // lora_id: no adapters.
                write_nil(w)?;
                write_str(w, MEDIUM)?;
            }
            KvEvent::BlockRemoved { block_hashes } => {
                write_array_len(w, 3)?;
                write_str(w, "BlockRemoved")?;
                write_hashes(w, block_hashes)?;
                write_str(w, MEDIUM)?;
            }
            KvEvent::AllBlocksCleared => {
                write_array_len(w, 1)?;
                write_str(w, "AllBlocksCleared")?;
            }
        }
    }
    Ok(out)
}

fn write_nil(w: &mut Vec<u8>) -> Result<(), EncodeError> {
    rmp::encode::write_nil(w).map_err(rmp::encode::ValueWriteError::InvalidMarkerWrite)
}

fn write_hashes(w: &mut Vec<u8>, hashes: &[BlockHash]) -> Result<(), EncodeError> {
    rmp::encode::write_array_len(w, hashes.len() as u32)?;
    for &h in hashes {
        write_hash(w, h)?;
    }
    Ok(())
}

fn write_hash(w: &mut Vec<u8>, h: BlockHash) -> Result<(), EncodeError> {
    rmp::encode::write_bin(w, &h.to_bytes())?;
    Ok(())
}

/// Opens the socket (binding now, so a port in use fails the start) and publishes the
/// engine's KV-cache events on it until the server drains or the engine stops.
pub async fn start(
    config: ZmqEventsConfig,
    state: AppState,
) -> Result<tokio::task::JoinHandle<()>, ZmqStartError> {
    let mut socket = PubSocket::new();
    let peers = socket.monitor();
    if config.bind {
        socket
            .bind(&config.address)
            .await
            .map_err(|source| ZmqStartError {
                endpoint: config.endpoint.clone(),
                source,
            })?;
    }
    Ok(tokio::spawn(publish(config, state, socket, peers)))
}

async fn publish(
    config: ZmqEventsConfig,
    state: AppState,
    mut socket: PubSocket,
    peers: impl Stream<Item = SocketEvent> + Unpin,
) {
    let mut peers = Some(peers);
    if !config.bind {
        // The subscriber binds (llm-d's indexer); it may start after us, so keep trying.
        let mut wait = Duration::from_millis(100);
        while let Err(e) = socket.connect(&config.address).await {
            if state.drain().is_draining() {
                return;
            }
            log::warn!(
                "kv events: cannot connect to {}: {e}; retrying",
                config.endpoint
            );
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    }
    let mut rx = state.engine().subscribe_kv_events();
    let mut seq: u64 = 0;
    let mut snapshot_at: Option<tokio::time::Instant> = None;
    loop {
        if state.drain().is_draining() {
            return;
        }
        let snapshot_due = async {
            match snapshot_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            got = rx.recv() => match got {
                Ok(batch) => {
                    match encode_batch(&batch) {
                        Ok(payload) => {
                            let frames: Vec<Bytes> = vec![
                                Bytes::from(config.topic.clone().into_bytes()),
                                Bytes::copy_from_slice(&seq.to_be_bytes()),
                                Bytes::from(payload),
                            ];
                            if let Ok(msg) = ZmqMessage::try_from(frames) {
                                if let Err(e) = socket.send(msg).await {
                                    log::warn!("kv events: send failed: {e}");
                                }
                            }
                        }
                        Err(e) => log::warn!("kv events: batch not encoded: {e}"),
                    }
                    seq += 1;
                }
                Err(RecvError::Lagged(n)) => {
                    state.metrics().observe_kv_events_dropped(n);
                    seq += n;
                }
                Err(RecvError::Closed) => return,
            },
            event = next_peer_event(&mut peers) => match event {
                Some(SocketEvent::Accepted(..) | SocketEvent::Connected(..)) => {
                    snapshot_at = Some(tokio::time::Instant::now() + SNAPSHOT_DELAY);
                }
                Some(_) => {}
                // The monitor is gone: no more snapshots on connection (events still flow).
                None => peers = None,
            },
            () = snapshot_due => {
                snapshot_at = None;
                // A new subscription makes the engine publish a snapshot batch to every
                // receiver, this one included; the new receiver itself is not needed.
                drop(state.engine().subscribe_kv_events());
            }
            () = tokio::time::sleep(DRAIN_POLL) => {}
        }
    }
}

/// The next peer event; never resolves once the monitor has closed.
async fn next_peer_event(
    peers: &mut Option<impl Stream<Item = SocketEvent> + Unpin>,
) -> Option<SocketEvent> {
    match peers {
        Some(p) => p.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_str(out: &mut Vec<u8>, s: &str) {
        assert!(s.len() < 32);
        out.push(0xa0 | s.len() as u8);
        out.extend_from_slice(s.as_bytes());
    }

    fn with_hash(out: &mut Vec<u8>, h: u128) {
        out.extend_from_slice(&[0xc4, 16]);
        out.extend_from_slice(&h.to_be_bytes());
    }

    #[test]
    fn batches_encode_as_vllm_msgpack_byte_for_byte() {
        let batch = KvEventBatch {
            seq: 9,
            ts: 1.5,
            events: vec![
                KvEvent::BlockStored {
                    block_hashes: vec![BlockHash(0xabcd)],
                    parent_block_hash: None,
                    token_ids: vec![1, 300],
                    block_size: 2,
                    extra: None,
                },
                KvEvent::BlockStored {
                    block_hashes: vec![BlockHash(7), BlockHash(8)],
                    parent_block_hash: Some(BlockHash(0xabcd)),
                    token_ids: vec![70_000, 2, 3, 4],
                    block_size: 2,
                    extra: None,
                },
                KvEvent::BlockRemoved {
                    block_hashes: vec![BlockHash(u128::MAX)],
                },
                KvEvent::AllBlocksCleared,
            ],
        };
        // By hand from the MessagePack spec: fixarray 0x90|n, float64 0xcb, fixstr 0xa0|n,
        // bin8 0xc4, nil 0xc0, uint16 0xcd, uint32 0xce, positive fixint as itself.
        let mut want = vec![0x92, 0xcb];
        want.extend_from_slice(&1.5f64.to_be_bytes());
        want.push(0x94);
        want.push(0x97);
        with_str(&mut want, "BlockStored");
        want.push(0x91);
        with_hash(&mut want, 0xabcd);
        want.extend_from_slice(&[0xc0, 0x92, 0x01, 0xcd, 0x01, 0x2c, 0x02, 0xc0]);
        with_str(&mut want, "CPU");
        want.push(0x97);
        with_str(&mut want, "BlockStored");
        want.push(0x92);
        with_hash(&mut want, 7);
        with_hash(&mut want, 8);
        with_hash(&mut want, 0xabcd);
        want.extend_from_slice(&[
            0x94, 0xce, 0x00, 0x01, 0x11, 0x70, 0x02, 0x03, 0x04, 0x02, 0xc0,
        ]);
        with_str(&mut want, "CPU");
        want.push(0x93);
        with_str(&mut want, "BlockRemoved");
        want.push(0x91);
        with_hash(&mut want, u128::MAX);
        with_str(&mut want, "CPU");
        want.push(0x91);
        with_str(&mut want, "AllBlocksCleared");
        assert_eq!(encode_batch(&batch).unwrap(), want);
    }

    #[test]
    fn configs_parse_like_vllm_and_bad_ones_name_the_problem() {
        let on = |rest: &str| format!(r#"{{"enable_kv_cache_events": true{rest}}}"#);
        let c = parse_config(&on("")).unwrap().unwrap();
        assert_eq!(
            (c.address.as_str(), c.bind, c.topic.as_str()),
            ("tcp://0.0.0.0:5557", true, "")
        );
        let c = parse_config(&on(
            r#", "publisher": "zmq", "endpoint": "tcp://indexer.svc:5557", "topic": "kv@p@m", "hwm": 10"#,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.address.as_str(), c.bind, c.topic.as_str()),
            ("tcp://indexer.svc:5557", false, "kv@p@m")
        );
        assert_eq!(
            parse_config(r#"{"enable_kv_cache_events": false}"#),
            Ok(None)
        );
        assert_eq!(parse_config(&on(r#", "publisher": "null""#)), Ok(None));
        assert_eq!(
            parse_config(&on(r#", "publisher": "nats""#)),
            Err(ZmqConfigError::Publisher("nats".into()))
        );
        for ep in ["ipc:///tmp/x", "tcp://host", "tcp://:1", "tcp://h:99999"] {
            assert_eq!(
                parse_config(&on(&format!(r#", "endpoint": "{ep}""#))),
                Err(ZmqConfigError::Endpoint(ep.into())),
                "{ep}"
            );
        }
        assert_eq!(
            parse_config(&on(r#", "replay_endpoint": "tcp://*:5558""#)),
            Err(ZmqConfigError::Replay)
        );
        assert!(
            matches!(parse_config(&on(r#", "bogus": 1"#)), Err(ZmqConfigError::Json(m)) if m.contains("bogus"))
        );
        assert!(matches!(parse_config("{"), Err(ZmqConfigError::Json(_))));
    }
}
