//! Who may call the operator API: bearer API tokens with scopes (`read`,
//! `submit`, `admin`), and, only where `[api] loopback_is_admin` is set, the
//! local operator on loopback without one.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::coordinator::Coordinator;
use crate::store::{Store, StoreError};
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::identity::random_word;

/// The admin token the coordinator writes on first start, in its data dir.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// What a token may do; each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Every GET but the token lists.
    Read,
    /// Read, and submit jobs and cancel its own.
    Submit,
    /// Everything.
    Admin,
}

impl Scope {
    /// The scope's name in tokens and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Submit => "submit",
            Scope::Admin => "admin",
        }
    }

    /// Reads a scope name.
    pub fn parse(s: &str) -> Option<Scope> {
        [Scope::Read, Scope::Submit, Scope::Admin]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Scope::parse(s).ok_or_else(|| format!("{s:?} is not a scope: use read, submit or admin"))
    }
}

/// The client a request came from, set by the server for every connection.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Who made a request: the token's id (`loopback` for the local operator)
/// and its scope.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The API token's id.
    pub id: String,
    /// What it may do.
    pub scope: Scope,
}

/// A new API token: `<id>.<secret>`, returned with its id.
pub fn new_token() -> (String, String, String) {
    let (id, secret) = (random_word(8), random_word(32));
    (format!("tma{id}.{secret}"), format!("tma{id}"), secret)
}

/// Creates the first admin token and writes it to `<data_dir>/admin-token`
/// (0600) when the store has no API token yet.
pub fn bootstrap(store: &mut Store, data_dir: &Path) -> Result<(), StoreError> {
    if !store.api_tokens()?.is_empty() {
        return Ok(());
    }
    let (token, id, secret) = new_token();
    store.create_api_token(
        &id,
        &secret,
        Scope::Admin.as_str(),
        "bootstrap",
        SystemClock.now_ms(),
    )?;
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    if let Err(e) = tidemill_runtime::tls::write_private(&path, format!("{token}\n").as_bytes()) {
        tracing::error!(path = %path.display(), error = %e, "cannot write the admin token");
    } else {
        tracing::info!(token_id = %id, path = %path.display(), "created the first admin API token");
    }
    Ok(())
}

/// Why an `Authorization` header was refused. Its text never quotes the
/// header, which may hold a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadAuthorization {
    /// Bytes that are not visible ASCII.
    #[error("the Authorization header is not plain text; send `Authorization: Bearer TOKEN`")]
    NotText,
    /// A scheme other than Bearer, or none.
    #[error(
        "the Authorization header does not use the Bearer scheme; send `Authorization: Bearer TOKEN`"
    )]
    NotBearer,
    /// `Bearer` with nothing after it.
    #[error(
        "the Authorization header has no token after Bearer; send `Authorization: Bearer TOKEN`"
    )]
    NoToken,
}

/// The bearer token of a request: `None` without an `Authorization` header.
/// The scheme is matched without regard to case (RFC 9110, 11.1); anything
/// else in the header is an error, never a fallback.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Result<Option<&str>, BadAuthorization> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| BadAuthorization::NotText)?
        .trim();
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(BadAuthorization::NotBearer);
    }
    match token.trim() {
        "" => Err(BadAuthorization::NoToken),
        token => Ok(Some(token)),
    }
}

/// The scope a request needs: `None` for the health check, which anyone may
/// read.
fn needed(method: &Method, path: &str) -> Option<Scope> {
    let admin_paths = ["/v1/tokens", "/v1/api-tokens", "/v1/ca", "/v1/leadership"];
    if ["/healthz", "/livez", "/readyz"].contains(&path) {
        None
    } else if admin_paths.iter().any(|p| path.starts_with(p))
        || (method == Method::POST && path.starts_with("/v1/nodes/"))
    {
        Some(Scope::Admin)
    } else if method == Method::GET {
        Some(Scope::Read)
    } else {
        Some(Scope::Submit)
    }
}

fn refuse(status: StatusCode, why: String) -> Response {
    (status, axum::Json(crate::api::ApiError { error: why })).into_response()
}

/// The middleware that authenticates every request and checks its scope.
pub async fn authenticate(
    State(c): State<Arc<Coordinator>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(needed) = needed(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let bearer = match bearer_token(req.headers()) {
        Ok(bearer) => bearer,
        Err(why) => {
            tracing::warn!(?peer, %why, "API request with a malformed Authorization header");
            return refuse(StatusCode::UNAUTHORIZED, why.to_string());
        }
    };
    let caller = match bearer {
        Some(token) => {
            let (id, secret) = token.split_once('.').unwrap_or((token, ""));
            match c.store.lock().unwrap().api_token_scope(id, secret) {
                Ok(Some(scope)) => Caller {
                    id: id.to_string(),
                    scope: Scope::parse(&scope).unwrap_or(Scope::Read),
                },
                Ok(None) => {
                    tracing::warn!(?peer, "API request with an unknown or revoked token");
                    return refuse(
                        StatusCode::UNAUTHORIZED,
                        "the API token is unknown or revoked; `tidemill-cloud api-token create` makes one".into(),
                    );
                }
                Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }
        None if c.cfg.api.loopback_is_admin && peer.is_some_and(|p| p.ip().is_loopback()) => {
            Caller {
                id: "loopback".into(),
                scope: Scope::Admin,
            }
        }
        None => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "this API needs a token (`Authorization: Bearer TOKEN`): pass --api-token or set TIDEMILL_API_TOKEN; on the coordinator's host the CLI reads the admin token from <data_dir>/admin-token by itself".into(),
            );
        }
    };
    if caller.scope < needed {
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "API token {} has scope {}; this needs {}",
                caller.id,
                caller.scope.as_str(),
                needed.as_str()
            ),
        );
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_needs_its_scope() {
        assert_eq!(needed(&Method::GET, "/healthz"), None);
        assert_eq!(needed(&Method::GET, "/readyz"), None);
        assert_eq!(needed(&Method::GET, "/metrics"), Some(Scope::Read));
        assert_eq!(needed(&Method::GET, "/v1/jobs"), Some(Scope::Read));
        assert_eq!(needed(&Method::POST, "/v1/jobs"), Some(Scope::Submit));
        assert_eq!(
            needed(&Method::POST, "/v1/jobs/3/cancel"),
            Some(Scope::Submit)
        );
        assert_eq!(needed(&Method::GET, "/v1/tokens"), Some(Scope::Admin));
        assert_eq!(needed(&Method::POST, "/v1/api-tokens"), Some(Scope::Admin));
        assert_eq!(
            needed(&Method::POST, "/v1/nodes/e1/remove"),
            Some(Scope::Admin)
        );
        assert_eq!(
            needed(&Method::POST, "/v1/nodes/e1/drain"),
            Some(Scope::Admin)
        );
        assert_eq!(
            needed(&Method::POST, "/v1/leadership/step-down"),
            Some(Scope::Admin)
        );
        assert_eq!(
            needed(&Method::GET, "/v1/nodes/e1/forecast"),
            Some(Scope::Read)
        );
        assert!(Scope::Read < Scope::Submit && Scope::Submit < Scope::Admin);
        assert_eq!("submit".parse::<Scope>(), Ok(Scope::Submit));
        assert!("root".parse::<Scope>().is_err());
    }

    fn header(value: &[u8]) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            axum::http::HeaderValue::from_bytes(value).unwrap(),
        );
        h
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case_and_nothing_else_passes() {
        let none = axum::http::HeaderMap::new();
        assert_eq!(bearer_token(&none), Ok(None));
        for ok in [
            &b"Bearer a.b"[..],
            b"bearer a.b",
            b"BEARER  a.b ",
            b" bEaReR a.b",
        ] {
            assert_eq!(bearer_token(&header(ok)), Ok(Some("a.b")), "{ok:?}");
        }
        assert_eq!(
            bearer_token(&header(b"Bearer")),
            Err(BadAuthorization::NoToken)
        );
        assert_eq!(
            bearer_token(&header(b"bearer   ")),
            Err(BadAuthorization::NoToken)
        );
        assert_eq!(
            bearer_token(&header(b"Basic a.b")),
            Err(BadAuthorization::NotBearer)
        );
        assert_eq!(
            bearer_token(&header(b"a.b")),
            Err(BadAuthorization::NotBearer)
        );
        assert_eq!(
            bearer_token(&header(b"Bearera.b")),
            Err(BadAuthorization::NotBearer)
        );
        assert_eq!(bearer_token(&header(b"")), Err(BadAuthorization::NotBearer));
        assert_eq!(
            bearer_token(&header(b"Bearer \xff")),
            Err(BadAuthorization::NotText)
        );
    }
}
