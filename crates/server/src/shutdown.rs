//! Serving with a graceful stop, as a rolling update needs it.
//!
//! The first stop signal starts draining: the listener stays open so that `/health` can answer
//! 503 at once (readiness fails, routers stop sending) and new generation requests get 503,
//! while the requests in flight run on for up to `shutdown_grace`. When none is left the
//! listener closes and `serve_until` returns [`Stopped::Drained`] once every response is written.
//! If the grace ends first, every request still in flight ends at once (a stream with an error
//! chunk, `[DONE]` and the chunked terminator; a whole request with a 503) and `serve_until`
//! returns [`Stopped::GraceExpired`]. A second stop signal returns [`Stopped::Forced`] at once.

use std::future::Future;
use std::time::Duration;

use futures_util::stream::{self, Stream, StreamExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::conn::serve_connections;
use crate::routes::router;
use crate::state::AppState;

/// How long responses may take to reach their clients once no request is in flight.
const FLUSH_MARGIN: Duration = Duration::from_secs(5);
/// How often a drain checks whether requests are still in flight.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// How [`serve_until`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every request in flight finished within the grace.
    Drained,
    /// The grace ended with requests in flight; they were answered with errors.
    GraceExpired,
    /// A second stop signal came while draining.
    Forced,
}

/// Serves `state` on `listener` until `shutdown` completes, then drains (see the module docs).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<Stopped> {
    serve_until(listener, state, Box::pin(stream::once(shutdown))).await
}

/// Serves `state` on `listener`; the first item of `signals` starts the drain, a second one
/// stops at once.
pub async fn serve_until(
    listener: TcpListener,
    state: AppState,
    mut signals: impl Stream<Item = ()> + Send + Unpin,
) -> std::io::Result<Stopped> {
    let grace = state.config().shutdown_grace;
    let (close_tx, close_rx) = tokio::sync::oneshot::channel::<()>();
    let header_timeout = state.config().header_read_timeout;
    let server = serve_connections(
        listener,
        router(state.clone()),
        header_timeout,
        async move {
            let _ = close_rx.await;
        },
    );
    tokio::pin!(server);

    tokio::select! {
        r = &mut server => return r.map(|()| Stopped::Drained),
        Some(()) = signals.next() => {}
    }
    state.drain().start();
    log::info!(
        "oxllm serve: draining {} requests (up to {} s); Ctrl-C again to stop now",
        state.admission().in_flight(),
        grace.as_secs_f64()
    );
    let deadline = Instant::now() + grace;
    let outcome = tokio::select! {
        r = &mut server => return r.map(|()| Stopped::Drained),
        Some(()) = signals.next() => return Ok(Stopped::Forced),
        () = idle(&state) => Stopped::Drained,
        () = tokio::time::sleep_until(deadline) => {
            let left = state.admission().in_flight();
            log::warn!("oxllm serve: grace of {} s over; ending {left} requests still in flight", grace.as_secs_f64());
            state.drain().expire();
            Stopped::GraceExpired
        }
    };
    let _ = close_tx.send(());
    let flush_until = deadline.max(Instant::now()) + FLUSH_MARGIN;
    tokio::select! {
        r = &mut server => r.map(|()| outcome),
        Some(()) = signals.next() => Ok(Stopped::Forced),
        () = tokio::time::sleep_until(flush_until) => {
            log::warn!("oxllm serve: connections still open {} s after the grace; closing them", FLUSH_MARGIN.as_secs());
            Ok(outcome)
        }
    }
}

/// Completes once no engine request is in flight (seen twice in a row, so that a request
/// admitted just as the drain began is not missed).
async fn idle(state: &AppState) {
    let mut quiet = 0;
    while quiet < 2 {
        quiet = if state.admission().in_flight() == 0 {
            quiet + 1
        } else {
            0
        };
        tokio::time::sleep(IDLE_POLL).await;
    }
}

/// One item per SIGINT (Ctrl-C) or SIGTERM.
pub fn signals() -> impl Stream<Item = ()> + Send + Unpin {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        async fn recv(s: &mut Option<Signal>) -> Option<()> {
            match s {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        }
        let int = signal(SignalKind::interrupt()).ok();
        let term = signal(SignalKind::terminate()).ok();
        Box::pin(stream::unfold(
            (int, term),
            |(mut int, mut term)| async move {
                let got = tokio::select! {
                    s = recv(&mut int) => s,
                    s = recv(&mut term) => s,
                };
                got.map(|()| ((), (int, term)))
            },
        ))
    }
    #[cfg(not(unix))]
    {
        Box::pin(stream::unfold((), |()| async {
            tokio::signal::ctrl_c().await.ok().map(|()| ((), ()))
        }))
    }
}
