//! The API's connection loop: HTTP/1 over TCP or TLS, with a cap on open
//! connections, a deadline for a request's headers and for the whole of it,
//! and each request tagged with the client's address for [`crate::auth`].

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::auth::Peer;

/// A connection's lifetime, in request timeouts: keep-alive is allowed, but
/// no connection stays open indefinitely.
pub const CONNECTION_LIFETIMES: u32 = 6;

/// What the loop allows each connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Time to send a request's headers; a connection lives at most
    /// [`CONNECTION_LIFETIMES`] times this.
    pub request_timeout: Duration,
}

/// Serves `app` on `listener` until the task is dropped; `tls` makes it HTTPS.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept an API connection");
                continue;
            }
        };
        let (app, tls) = (app.clone(), tls.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
                req.extensions_mut().insert(Peer(peer));
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.request_timeout);
            let served = async {
                match tls {
                    Some(tls) => match tls.accept(stream).await {
                        Ok(stream) => http
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(format!("TLS handshake: {e}")),
                    },
                    None => http
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                        .map_err(|e| e.to_string()),
                }
            };
            // A connection may stay open for keep-alive, but not idle forever.
            match tokio::time::timeout(limits.request_timeout * CONNECTION_LIFETIMES, served).await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "API connection ended"),
                Err(_) => tracing::debug!(%peer, "API connection cut at its time limit"),
            }
        });
    }
}

/// The TLS acceptor for the API: the coordinator's server certificate.
pub fn acceptor(
    identity: &tidemill_runtime::tls::ServerIdentity,
) -> Result<tokio_rustls::TlsAcceptor, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])?
    .with_no_client_auth()
    .with_single_cert(identity.chain.clone(), identity.key.clone_key())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
