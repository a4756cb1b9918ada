//! `GET /v1/kv_events` (with `--kv-events`): the engine's KV-cache events as server-sent
//! events, one `data:` JSON batch per engine step that changed the prefix cache, its `id:` the
//! batch's sequence number, starting with a snapshot of the cache. A router subscribes per
//! replica and mirrors which block hashes each one holds (docs/DEPLOY.md).
//!
//! Guarantees: subscribing never slows the engine (a subscriber that falls behind misses the
//! oldest batches, counted in `oxllm_kv_events_dropped_total`, and sees the jump in `seq`); the
//! stream ends when the server starts draining, so it never holds a shutdown up. The events
//! carry prompt token ids, so the route sits behind the API key like every other.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use oxllm_engine::{BlockHash, KvEventReceiver};
use tokio::sync::broadcast::error::RecvError;

use crate::error::ApiError;
use crate::protocol::kv_events::KvEventBatchJson;
use crate::sse::to_json;
use crate::state::AppState;

/// How often an idle stream checks whether the server drains.
const DRAIN_POLL: Duration = Duration::from_millis(250);

pub async fn kv_events(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.config().kv_events {
        return Err(ApiError::not_found(
            "KV-cache events are off on this server; start it with `oxllm serve --kv-events`",
        ));
    }
    let rx = state.engine().subscribe_kv_events();
    let events = stream::unfold((rx, state), |(mut rx, state)| async move {
        let event = next_event(&mut rx, &state).await?;
        Some((Ok::<Event, Infallible>(event), (rx, state)))
    });
    let mut resp = Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response();
    resp.headers_mut().insert(
        "x-oxllm-kv-block-hash",
        HeaderValue::from_static(BlockHash::SCHEME),
    );
    Ok(resp)
}

/// The next batch as an SSE event; None once the engine is gone or the server drains.
async fn next_event(rx: &mut KvEventReceiver, state: &AppState) -> Option<Event> {
    loop {
        if state.drain().is_draining() {
            return None;
        }
        tokio::select! {
            got = rx.recv() => match got {
                Ok(batch) => {
                    let json = to_json(&KvEventBatchJson::from(batch.as_ref()));
                    return Some(Event::default().id(batch.seq.to_string()).data(json));
                }
                Err(RecvError::Lagged(n)) => state.metrics().observe_kv_events_dropped(n),
                Err(RecvError::Closed) => return None,
            },
            () = tokio::time::sleep(DRAIN_POLL) => {}
        }
    }
}
