//! The operator HTTP API (JSON): nodes, jobs, health and metrics. The CLI is a
//! thin client of it.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::coordinator::Coordinator;
use crate::job::{JobFile, JobRecord};
use crate::store::{LinkRecord, NodeRecord, StoreError, TokenRecord};
use tidemill_proto::NodeForecast;
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::identity::JoinToken;

/// The API's routes.
pub fn router(coord: Arc<Coordinator>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .route("/v1/nodes", get(nodes))
        .route("/v1/nodes/{id}/forecast", get(node_forecast))
        .route("/v1/links", get(links))
        .route("/v1/jobs", get(list_jobs).post(submit))
        .route("/v1/jobs/{id}", get(show_job))
        .route("/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/tokens", get(list_tokens).post(create_token))
        .route("/v1/tokens/{id}/revoke", post(revoke_token))
        .route("/v1/nodes/{id}/remove", post(remove_node))
        .with_state(coord)
}

/// The body of every error response.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong and how to fix it.
    pub error: String,
}

/// The answer to a submission.
#[derive(Debug, Serialize, Deserialize)]
pub struct Submitted {
    /// The new job's id.
    pub id: u64,
}

/// A request for a join token.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct TokenRequest {
    /// Seconds until it stops working (`None`: never).
    pub ttl_secs: Option<u64>,
    /// Joins it allows (`None`: any number).
    pub uses: Option<u32>,
    /// What it is for, shown in listings.
    #[serde(default)]
    pub description: String,
}

/// A new join token: the only time its secret is shown.
#[derive(Debug, Serialize, Deserialize)]
pub struct NewToken {
    /// Its record, as listings show it.
    pub record: TokenRecord,
    /// The token to hand to edges.
    pub token: String,
}

/// The answer to a node removal.
#[derive(Debug, Serialize, Deserialize)]
pub struct Removed {
    /// The node.
    pub node_id: String,
    /// Certificates revoked.
    pub revoked: usize,
}

struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, Json(ApiError { error: self.1 })).into_response()
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store failure in the API");
        Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

fn not_found(id: u64) -> Failure {
    Failure(
        StatusCode::NOT_FOUND,
        format!("no job {id}; `tidemill-cloud jobs list` shows the jobs"),
    )
}

async fn nodes(State(c): State<Arc<Coordinator>>) -> Result<Json<Vec<NodeRecord>>, Failure> {
    Ok(Json(c.store.lock().unwrap().nodes()?))
}

async fn links(State(c): State<Arc<Coordinator>>) -> Result<Json<Vec<LinkRecord>>, Failure> {
    Ok(Json(c.store.lock().unwrap().links()?))
}

async fn node_forecast(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<String>,
) -> Result<Json<NodeForecast>, Failure> {
    let store = c.store.lock().unwrap();
    if let Some(f) = store.forecast(&id)? {
        return Ok(Json(f));
    }
    let why = if store.node_known(&id)? {
        format!("node {id} has not sent a forecast yet; edges send one soon after they connect")
    } else {
        format!("no node {id}; `tidemill-cloud nodes` lists the nodes")
    };
    Err(Failure(StatusCode::NOT_FOUND, why))
}

async fn list_jobs(State(c): State<Arc<Coordinator>>) -> Result<Json<Vec<JobRecord>>, Failure> {
    Ok(Json(c.store.lock().unwrap().jobs()?))
}

async fn show_job(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<u64>,
) -> Result<Json<JobRecord>, Failure> {
    c.store
        .lock()
        .unwrap()
        .job(id)?
        .map(Json)
        .ok_or_else(|| not_found(id))
}

async fn submit(
    State(c): State<Arc<Coordinator>>,
    body: Result<Json<JobFile>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Submitted>), Failure> {
    let Json(spec) = body.map_err(|e| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("invalid job: {}", e.body_text()),
        )
    })?;
    spec.validate()
        .map_err(|e| Failure(StatusCode::BAD_REQUEST, e.to_string()))?;
    let now = c.clock.now_ms();
    let id = c.store.lock().unwrap().submit(&spec, now)?;
    tracing::info!(job_id = id, name = %spec.name, "job submitted");
    c.wake.notify_one();
    Ok((StatusCode::CREATED, Json(Submitted { id })))
}

async fn cancel_job(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<u64>,
) -> Result<Json<JobRecord>, Failure> {
    let now = c.clock.now_ms();
    let job = c
        .store
        .lock()
        .unwrap()
        .request_cancel(id, now)?
        .ok_or_else(|| not_found(id))?;
    tracing::info!(
        job_id = id,
        state = %job.state.as_str(),
        "job cancel requested"
    );
    c.wake.notify_one();
    Ok(Json(job))
}

async fn create_token(
    State(c): State<Arc<Coordinator>>,
    body: Result<Json<TokenRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<NewToken>), Failure> {
    let Json(req) = body.map_err(|e| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("invalid token request: {}", e.body_text()),
        )
    })?;
    if req.description.len() > 200 || req.description.contains(char::is_control) {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            "the description must be at most 200 characters, with no control characters".into(),
        ));
    }
    // Tokens expire in real time, as the certificates they buy do.
    let now = SystemClock.now_ms();
    let expires = req.ttl_secs.map(|s| {
        now.saturating_add(
            i64::try_from(s)
                .unwrap_or(i64::MAX / 2)
                .saturating_mul(1000),
        )
    });
    let token = JoinToken::generate(&c.authority.pin());
    let mut store = c.store.lock().unwrap();
    store.create_token(
        &token,
        &req.description,
        now,
        expires,
        req.uses.map(i64::from),
    )?;
    let record = store
        .tokens()?
        .into_iter()
        .find(|t| t.id == token.id)
        .expect("the token just stored");
    tracing::info!(token_id = %token.id, uses = ?req.uses, ttl_secs = ?req.ttl_secs, "join token created");
    Ok((
        StatusCode::CREATED,
        Json(NewToken {
            record,
            token: token.reveal(),
        }),
    ))
}

async fn list_tokens(State(c): State<Arc<Coordinator>>) -> Result<Json<Vec<TokenRecord>>, Failure> {
    Ok(Json(c.store.lock().unwrap().tokens()?))
}

async fn revoke_token(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<String>,
) -> Result<Json<Vec<TokenRecord>>, Failure> {
    let mut store = c.store.lock().unwrap();
    if !store.revoke_token(&id, SystemClock.now_ms())? {
        return Err(Failure(
            StatusCode::NOT_FOUND,
            format!("no join token {id:?}; `tidemill-cloud token list` shows them"),
        ));
    }
    tracing::info!(token_id = %id, "join token revoked");
    Ok(Json(store.tokens()?))
}

async fn remove_node(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<String>,
) -> Result<Json<Removed>, Failure> {
    let revoked = {
        let mut store = c.store.lock().unwrap();
        if !store.node_known(&id)? {
            return Err(Failure(
                StatusCode::NOT_FOUND,
                format!("no node {id:?}; `tidemill-cloud nodes` lists the nodes"),
            ));
        }
        store.remove_node(&id, SystemClock.now_ms())?
    };
    c.drop_session(&id);
    tracing::info!(node_id = %id, revoked, "node removed; its certificates are revoked");
    c.wake.notify_one();
    Ok(Json(Removed {
        node_id: id,
        revoked,
    }))
}

/// Prometheus text exposition of a few gauges and counters.
async fn metrics(State(c): State<Arc<Coordinator>>) -> Result<String, Failure> {
    use std::sync::atomic::Ordering::Relaxed;
    let counts = c.store.lock().unwrap().counts()?;
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE tidemill_nodes gauge");
    let _ = writeln!(
        out,
        "tidemill_nodes{{state=\"online\"}} {}",
        counts.nodes_online
    );
    let _ = writeln!(
        out,
        "tidemill_nodes{{state=\"offline\"}} {}",
        counts.nodes_offline
    );
    let _ = writeln!(out, "# TYPE tidemill_nodes_connected gauge");
    let _ = writeln!(out, "tidemill_nodes_connected {}", c.connected().len());
    let _ = writeln!(out, "# TYPE tidemill_jobs gauge");
    for (state, n) in &counts.jobs {
        let _ = writeln!(out, "tidemill_jobs{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(out, "# TYPE tidemill_reports_stored gauge");
    let _ = writeln!(out, "tidemill_reports_stored {}", counts.reports);
    let _ = writeln!(out, "# TYPE tidemill_refused_connections_total counter");
    let _ = writeln!(
        out,
        "tidemill_refused_connections_total {}",
        c.counters.refused_connections.load(Relaxed)
    );
    let _ = writeln!(out, "# TYPE tidemill_refused_frames_total counter");
    let _ = writeln!(
        out,
        "tidemill_refused_frames_total {}",
        c.counters.refused_frames.load(Relaxed)
    );
    let _ = writeln!(out, "# TYPE tidemill_refused_identity_total counter");
    let _ = writeln!(
        out,
        "tidemill_refused_identity_total {}",
        c.counters.refused_identity.load(Relaxed)
    );
    let _ = writeln!(out, "# TYPE tidemill_joins_total counter");
    let _ = writeln!(
        out,
        "tidemill_joins_total {}",
        c.counters.joins.load(Relaxed)
    );
    Ok(out)
}
