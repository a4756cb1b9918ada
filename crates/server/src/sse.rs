//! Server-sent events: a [`Run`]'s events turned into `data: {json}` chunks by a
//! [`ChunkWriter`], ended by `data: [DONE]`. A run that fails (an engine error, or the shutdown
//! grace ending) ends with one error chunk in OpenAI's error shape, then `[DONE]`.
//!
//! The body owns the `Run`: when the client disconnects, hyper drops the body and with it every
//! `RequestStream`, so the engine aborts the choices and frees their blocks.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use oxllm_engine::RequestEvent;

use crate::error::ApiError;
use crate::generation::Run;

/// Turns events into serialized chunks.
pub trait ChunkWriter: Send + 'static {
    /// Chunks sent before any event (e.g. each chat choice's role).
    fn start(&mut self, out: &mut VecDeque<String>);
    /// Chunks for one event of choice `index` (never an `Error`).
    fn event(&mut self, index: usize, ev: RequestEvent, out: &mut VecDeque<String>);
    /// Chunks after every choice finished (e.g. usage).
    fn finish(&mut self, out: &mut VecDeque<String>);
}

struct State<W> {
    run: Option<Run>,
    writer: W,
    queue: VecDeque<String>,
    done: bool,
}

impl<W> State<W> {
    /// Ends the stream with `e`'s error chunk and `[DONE]`, dropping the run (its choices abort).
    fn fail(&mut self, e: ApiError) {
        self.run = None;
        self.queue.push_back(e.body().to_string());
        self.queue.push_back("[DONE]".into());
        self.done = true;
    }
}

/// The SSE response for `run`.
pub fn respond<W: ChunkWriter>(run: Run, mut writer: W) -> Response {
    let mut queue = VecDeque::new();
    writer.start(&mut queue);
    let state = State {
        run: Some(run),
        writer,
        queue,
        done: false,
    };
    let chunks = stream::unfold(state, |mut st| async move {
        loop {
            if let Some(chunk) = st.queue.pop_front() {
                return Some((chunk, st));
            }
            if st.done {
                return None;
            }
            let next = match st.run.as_mut() {
                Some(run) => run.next().await,
                None => Ok(None),
            };
            match next {
                Ok(Some((_, RequestEvent::Error(e)))) => {
                    let param = st.run.as_ref().map_or("prompt", |r| r.prompt_param);
                    st.fail(ApiError::from_engine(&e, param))
                }
                Err(e) => st.fail(e),
                Ok(Some((i, ev))) => st.writer.event(i, ev, &mut st.queue),
                Ok(None) => {
                    st.run = None;
                    st.writer.finish(&mut st.queue);
                    st.queue.push_back("[DONE]".into());
                    st.done = true;
                }
            }
        }
    });
    Sse::new(chunks.map(|c| Ok::<Event, Infallible>(Event::default().data(c)))).into_response()
}

/// Serializes a chunk (our types always serialize; a failure would be a bug, reported inline).
pub fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| {
        ApiError::internal(format!("serialization failed: {e}"))
            .body()
            .to_string()
    })
}
