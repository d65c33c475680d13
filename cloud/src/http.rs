//! The API's connection loop: HTTP/1 over TCP or TLS, with caps on open
//! connections in total and per address ([`crate::conn_limit`]), a short
//! deadline for the TLS handshake and for each request's headers, a cap on the
//! bytes a connection buffers, and each request tagged with the client's
//! address for [`crate::auth`].

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::auth::Peer;
use crate::conn_limit::ConnLimit;

/// A connection's lifetime, in request timeouts: keep-alive is allowed, but
/// no connection stays open indefinitely.
pub const CONNECTION_LIFETIMES: u32 = 6;

/// The bytes a connection may buffer while its headers arrive (a larger head
/// is answered 431): requests' headers are small, and this bounds what an
/// open connection costs, whatever its client sends.
pub const MAX_BUFFER_BYTES: usize = 16 * 1024;

/// How long the loop waits before accepting again after the system refused a
/// connection (out of descriptors, say), rather than spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What the loop allows each connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Connections open at once from one address; more are closed as they
    /// arrive.
    pub max_connections_per_address: usize,
    /// Time to finish the TLS handshake, and to send each request's headers.
    pub header_timeout: Duration,
    /// A connection lives at most [`CONNECTION_LIFETIMES`] times this.
    pub request_timeout: Duration,
}

/// Serves `app` on `listener` until the task is dropped; `tls` makes it HTTPS.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
) {
    let places = ConnLimit::new(limits.max_connections, limits.max_connections_per_address);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept an API connection");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let place = match places.admit(peer.ip()) {
            Ok(place) => place,
            Err(why) => {
                // Closed at once: a client over its cap waits on nobody's place.
                tracing::debug!(%peer, %why, "API connection refused");
                drop(stream);
                continue;
            }
        };
        let (app, tls) = (app.clone(), tls.clone());
        tokio::spawn(async move {
            let _place = place;
            let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
                req.extensions_mut().insert(Peer(peer));
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(MAX_BUFFER_BYTES);
            let served = async {
                match tls {
                    Some(tls) => {
                        match tokio::time::timeout(limits.header_timeout, tls.accept(stream)).await
                        {
                            Ok(Ok(stream)) => http
                                .serve_connection(TokioIo::new(stream), service)
                                .await
                                .map_err(|e| e.to_string()),
                            Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
                            Err(_) => Err("TLS handshake: too slow".to_string()),
                        }
                    }
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
