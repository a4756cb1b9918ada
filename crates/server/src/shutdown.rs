//! Serving with a graceful stop: on the shutdown signal the listener closes, running requests
//! may finish for up to `shutdown_grace`, then whatever is left is dropped (its engine requests
//! abort) and `serve` returns.

use std::future::Future;

use tokio::net::TcpListener;

use crate::routes::router;
use crate::state::AppState;

/// Serves `state` on `listener` until `shutdown` completes (plus the grace period).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grace = state.config().shutdown_grace;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = tx.send(());
    };
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(signal);
    let deadline = async move {
        match rx.await {
            Ok(()) => tokio::time::sleep(grace).await,
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        r = server => r,
        () = deadline => {
            eprintln!("oxllm serve: requests still running after {grace:?}; stopping anyway");
            Ok(())
        }
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
