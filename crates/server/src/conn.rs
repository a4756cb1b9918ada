//! Accepting connections: HTTP/1.1 over each accepted socket, with the limits a server facing
//! real clients needs, and a graceful stop.
//!
//! - Header-read timeout: a connection must deliver a request's whole header within
//!   `header_read_timeout`, whether it is new or kept alive between requests (so an idle
//!   keep-alive socket is closed after the same time, and a slow-header client is cut off).
//! - Half-close: a client that shuts down its write side after sending a request still gets the
//!   response.
//! - Graceful stop: once `shutdown` completes, no connection is accepted; each open one finishes
//!   its request in flight and closes; the future returns when all are gone.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Serves `app` on `listener` until `shutdown` completes and the open connections are done.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .half_close(true)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: wait a moment rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A connection's own failure (reset, timeout) concerns only that client.
            let _ = conn.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
