//! The JSON shape of `GET /v1/kv_events` batches: vLLM's KV-cache events (`KVEventBatch` with
//! `BlockStored` / `BlockRemoved` / `AllBlocksCleared`, as its ZMQ publisher sends them to
//! llm-d's indexer) written as JSON objects with a `type` tag, block hashes as 32 hex digits
//! (the 16 bytes of the documented scheme, docs/DEPLOY.md), plus the batch's sequence number.

use oxllm_engine::{BlockHash, KvEvent, KvEventBatch};
use serde::Serialize;

/// Where the blocks live (vLLM's `medium`): host memory.
const MEDIUM: &str = "CPU";

#[derive(Clone, Debug, Serialize)]
pub struct KvEventBatchJson {
    /// One more than the previous batch's; a jump means batches were missed.
    pub seq: u64,
    /// Seconds since the Unix epoch when the step ended.
    pub ts: f64,
    pub events: Vec<KvEventJson>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type")]
pub enum KvEventJson {
    BlockStored {
        block_hashes: Vec<String>,
        parent_block_hash: Option<String>,
        token_ids: Vec<u32>,
        block_size: usize,
        /// The extra key the blocks were hashed with (always null today).
        extra_key: Option<u64>,
        medium: &'static str,
    },
    BlockRemoved {
        block_hashes: Vec<String>,
        medium: &'static str,
    },
    AllBlocksCleared {},
}

fn hex(hashes: &[BlockHash]) -> Vec<String> {
    hashes.iter().map(|h| h.to_hex()).collect()
}

impl From<&KvEvent> for KvEventJson {
    fn from(e: &KvEvent) -> Self {
        match e {
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                extra,
            } => KvEventJson::BlockStored {
                block_hashes: hex(block_hashes),
                parent_block_hash: parent_block_hash.map(BlockHash::to_hex),
                token_ids: token_ids.clone(),
                block_size: *block_size,
                extra_key: *extra,
                medium: MEDIUM,
            },
            KvEvent::BlockRemoved { block_hashes } => KvEventJson::BlockRemoved {
                block_hashes: hex(block_hashes),
                medium: MEDIUM,
            },
            KvEvent::AllBlocksCleared => KvEventJson::AllBlocksCleared {},
        }
    }
}

impl From<&KvEventBatch> for KvEventBatchJson {
    fn from(b: &KvEventBatch) -> Self {
        KvEventBatchJson {
            seq: b.seq,
            ts: b.ts,
            events: b.events.iter().map(KvEventJson::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn batches_serialize_in_the_documented_shape() {
        let batch = KvEventBatch {
            seq: 3,
            ts: 1.5,
            events: vec![
                KvEvent::BlockStored {
                    block_hashes: vec![BlockHash(1), BlockHash(2)],
                    parent_block_hash: None,
                    token_ids: vec![1, 2, 3, 4],
                    block_size: 2,
                    extra: None,
                },
                KvEvent::BlockRemoved {
                    block_hashes: vec![BlockHash(u128::MAX)],
                },
                KvEvent::AllBlocksCleared,
            ],
        };
        let got = serde_json::to_value(KvEventBatchJson::from(&batch)).unwrap();
        let one = format!("{:032x}", 1);
        let two = format!("{:032x}", 2);
        assert_eq!(
            got,
            json!({"seq": 3, "ts": 1.5, "events": [
                {"type": "BlockStored", "block_hashes": [one, two], "parent_block_hash": null,
                 "token_ids": [1, 2, 3, 4], "block_size": 2, "extra_key": null, "medium": "CPU"},
                {"type": "BlockRemoved", "block_hashes": ["f".repeat(32)], "medium": "CPU"},
                {"type": "AllBlocksCleared"}
            ]})
        );
    }
}
