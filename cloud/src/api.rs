//! The operator HTTP API (JSON): nodes, jobs, health and metrics. The CLI is a
//! thin client of it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::auth::{Caller, Scope};
use crate::coordinator::Coordinator;
use crate::job::{JobFile, JobRecord};
use crate::store::{ApiTokenRecord, LinkRecord, NodeRecord, StoreError, TokenRecord};
use crate::visibility::shown_to;
use tidemill_proto::NodeForecast;
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::identity::JoinToken;

/// The API's routes.
pub fn router(coord: Arc<Coordinator>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(crate::api_ops::readyz))
        .route("/metrics", get(crate::api_ops::metrics))
        .route("/v1/nodes", get(nodes))
        .route("/v1/nodes/{id}/forecast", get(node_forecast))
        .route("/v1/links", get(links))
        .route("/v1/jobs", get(list_jobs).post(submit))
        .route("/v1/jobs/{id}", get(show_job))
        .route("/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/tokens", get(list_tokens).post(create_token))
        .route("/v1/tokens/{id}/revoke", post(revoke_token))
        .route("/v1/nodes/{id}/remove", post(remove_node))
        .route("/v1/nodes/{id}/drain", post(drain_node))
        .route("/v1/nodes/{id}/uncordon", post(uncordon_node))
        .route(
            "/v1/nodes/{id}/accept-capabilities",
            post(crate::api_trust::accept_capabilities),
        )
        .route(
            "/v1/nodes/{id}/label/{label}",
            post(crate::api_trust::label),
        )
        .route(
            "/v1/nodes/{id}/unlabel/{label}",
            post(crate::api_trust::unlabel),
        )
        .route(
            "/v1/api-tokens",
            get(list_api_tokens).post(create_api_token),
        )
        .route("/v1/api-tokens/{id}/revoke", post(revoke_api_token))
        .route("/v1/ca", get(ca_status))
        .route("/v1/ca/rotate", post(rotate_ca))
        .route("/v1/leadership/step-down", post(crate::api_ops::step_down))
        .layer(axum::middleware::from_fn_with_state(
            coord.clone(),
            crate::auth::authenticate,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            coord.cfg.api.max_body_bytes,
        ))
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

/// Refuses a token description that would bloat listings or forge log lines.
fn check_description(description: &str) -> Result<(), Failure> {
    if description.len() > 200 || description.contains(char::is_control) {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            "the description must be at most 200 characters, with no control characters".into(),
        ));
    }
    Ok(())
}

/// The answer to a node removal.
#[derive(Debug, Serialize, Deserialize)]
pub struct Removed {
    /// The node.
    pub node_id: String,
    /// Certificates revoked.
    pub revoked: usize,
}

pub(crate) struct Failure(pub(crate) StatusCode, pub(crate) String);

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
        return Ok(Json(Arc::unwrap_or_clone(f)));
    }
    let why = if store.node_known(&id)? {
        format!("node {id} has not sent a forecast yet; edges send one soon after they connect")
    } else {
        format!("no node {id}; `tidemill-cloud nodes` lists the nodes")
    };
    Err(Failure(StatusCode::NOT_FOUND, why))
}

/// A page of a listing: at most `limit` (default and cap [`PAGE`]) items,
/// older than `before`.
#[derive(Debug, Default, Deserialize)]
pub struct Page {
    /// Items per page.
    pub limit: Option<u32>,
    /// Only items with a smaller id (the last id of the previous page).
    pub before: Option<u64>,
}

/// The default and largest page of a job listing.
pub const PAGE: u32 = 100;

async fn list_jobs(
    State(c): State<Arc<Coordinator>>,
    axum::Extension(caller): axum::Extension<Caller>,
    page: Result<axum::extract::Query<Page>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<JobRecord>>, Failure> {
    let axum::extract::Query(page) = page.map_err(|e| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("invalid page: {}; use ?limit=N&before=ID", e.body_text()),
        )
    })?;
    let limit = page.limit.unwrap_or(PAGE).clamp(1, PAGE);
    let store = c.store.lock().unwrap();
    let mut shown = Vec::new();
    for job in store.jobs_page(limit, page.before)? {
        let owner = store.job_owner(job.id)?.unwrap_or_default();
        shown.push(shown_to(job, &caller, &owner));
    }
    Ok(Json(shown))
}

async fn show_job(
    State(c): State<Arc<Coordinator>>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Json<JobRecord>, Failure> {
    let store = c.store.lock().unwrap();
    let mut job = store.job(id)?.ok_or_else(|| not_found(id))?;
    job.checkpoint_transfers = store.transfers(id)?;
    let owner = store.job_owner(id)?.unwrap_or_default();
    Ok(Json(shown_to(job, &caller, &owner)))
}

async fn submit(
    State(c): State<Arc<Coordinator>>,
    axum::Extension(caller): axum::Extension<Caller>,
    body: Result<Json<JobFile>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Submitted>), Failure> {
    let Json(spec) = body.map_err(|e| {
        let status = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        };
        Failure(
            status,
            format!(
                "invalid job: {} (bodies are limited to {} bytes, [api] max_body_bytes)",
                e.body_text(),
                c.cfg.api.max_body_bytes
            ),
        )
    })?;
    spec.validate()
        .map_err(|e| Failure(StatusCode::BAD_REQUEST, e.to_string()))?;
    let now = c.clock.now_ms();
    if spec.deadline.timestamp_millis() <= now && !spec.allow_past_deadline {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            format!(
                "the deadline {} is already past; give a later one, or set allow_past_deadline = true to run the job best-effort",
                spec.deadline.to_rfc3339()
            ),
        ));
    }
    let id = c.store.lock().unwrap().submit_as(&spec, &caller.id, now)?;
    tracing::info!(job_id = id, name = ?spec.name, token_id = %caller.id, "job submitted");
    c.wake.notify_one();
    Ok((StatusCode::CREATED, Json(Submitted { id })))
}

async fn cancel_job(
    State(c): State<Arc<Coordinator>>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<u64>,
) -> Result<Json<JobRecord>, Failure> {
    let job = c
        .store
        .lock()
        .unwrap()
        .job(id)?
        .ok_or_else(|| not_found(id))?;
    if job.state.is_terminal() {
        return Err(Failure(
            StatusCode::CONFLICT,
            format!(
                "job {id} already ended ({}); there is nothing to cancel",
                job.state.as_str()
            ),
        ));
    }
    if caller.scope < Scope::Admin {
        let owner = c.store.lock().unwrap().job_owner(id)?;
        if owner.as_deref().is_some_and(|o| o != caller.id) {
            return Err(Failure(
                StatusCode::FORBIDDEN,
                format!(
                    "job {id} was not submitted with API token {}; only its own token or an admin token may cancel it",
                    caller.id
                ),
            ));
        }
    }
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
    check_description(&req.description)?;
    // Tokens expire in real time, as the certificates they buy do.
    let now = SystemClock.now_ms();
    let expires = req.ttl_secs.map(|s| {
        now.saturating_add(
            i64::try_from(s)
                .unwrap_or(i64::MAX / 2)
                .saturating_mul(1000),
        )
    });
    let token = JoinToken::generate(&c.authority().pin());
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
            return Err(no_such_node(&id));
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

/// The answer to a drain or an uncordon.
#[derive(Debug, Serialize, Deserialize)]
pub struct Cordon {
    /// The node.
    pub node_id: String,
    /// Whether the node is drained now.
    pub drained: bool,
    /// The jobs asked to checkpoint and move off it (drain only).
    pub moving: Vec<u64>,
}

pub(crate) fn no_such_node(id: &str) -> Failure {
    Failure(
        StatusCode::NOT_FOUND,
        format!("no node {id:?}; `tidemill-cloud nodes` lists the nodes"),
    )
}

async fn drain_node(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<String>,
) -> Result<Json<Cordon>, Failure> {
    let now = c.clock.now_ms();
    let moving = c
        .store
        .lock()
        .unwrap()
        .drain(&id, now)?
        .ok_or_else(|| no_such_node(&id))?;
    tracing::info!(node_id = %id, jobs = moving.len(), "node drained: its jobs checkpoint and move");
    c.wake.notify_one();
    Ok(Json(Cordon {
        node_id: id,
        drained: true,
        moving,
    }))
}

async fn uncordon_node(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<String>,
) -> Result<Json<Cordon>, Failure> {
    let now = c.clock.now_ms();
    if !c.store.lock().unwrap().uncordon(&id, now)? {
        return Err(no_such_node(&id));
    }
    tracing::info!(node_id = %id, "node uncordoned: the scheduler may use it again");
    c.wake.notify_one();
    Ok(Json(Cordon {
        node_id: id,
        drained: false,
        moving: vec![],
    }))
}

/// A request for an API token.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApiTokenRequest {
    /// `read`, `submit` or `admin`.
    pub scope: String,
    /// What it is for, shown in listings.
    #[serde(default)]
    pub description: String,
}

/// A new API token: the only time its secret is shown.
#[derive(Debug, Serialize, Deserialize)]
pub struct NewApiToken {
    /// Its id.
    pub id: String,
    /// Its scope.
    pub scope: String,
    /// The token, for `Authorization: Bearer`.
    pub token: String,
}

async fn create_api_token(
    State(c): State<Arc<Coordinator>>,
    body: Result<Json<ApiTokenRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<NewApiToken>), Failure> {
    let Json(req) = body.map_err(|e| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("invalid API token request: {}", e.body_text()),
        )
    })?;
    let scope = Scope::parse(&req.scope).ok_or_else(|| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("{:?} is not a scope: use read, submit or admin", req.scope),
        )
    })?;
    check_description(&req.description)?;
    let (token, id, secret) = crate::auth::new_token();
    c.store.lock().unwrap().create_api_token(
        &id,
        &secret,
        scope.as_str(),
        &req.description,
        SystemClock.now_ms(),
    )?;
    tracing::info!(token_id = %id, scope = scope.as_str(), "API token created");
    Ok((
        StatusCode::CREATED,
        Json(NewApiToken {
            id,
            scope: scope.as_str().into(),
            token,
        }),
    ))
}

async fn list_api_tokens(
    State(c): State<Arc<Coordinator>>,
) -> Result<Json<Vec<ApiTokenRecord>>, Failure> {
    Ok(Json(c.store.lock().unwrap().api_tokens()?))
}

async fn revoke_api_token(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<String>,
) -> Result<Json<Vec<ApiTokenRecord>>, Failure> {
    let mut store = c.store.lock().unwrap();
    if !store.revoke_api_token(&id, SystemClock.now_ms())? {
        return Err(Failure(
            StatusCode::NOT_FOUND,
            format!("no API token {id:?}; `tidemill-cloud api-token list` shows them"),
        ));
    }
    tracing::info!(token_id = %id, "API token revoked");
    Ok(Json(store.api_tokens()?))
}

/// A CA rotation step.
#[derive(Debug, Serialize, Deserialize)]
pub struct RotateRequest {
    /// `begin` or `finish`.
    pub step: crate::rotation::Step,
    /// Finish even with nodes not yet renewed (they must join again).
    #[serde(default)]
    pub force: bool,
}

async fn ca_status(
    State(c): State<Arc<Coordinator>>,
) -> Result<Json<crate::rotation::CaStatus>, Failure> {
    Ok(Json(crate::rotation::status(&c)?))
}

async fn rotate_ca(
    State(c): State<Arc<Coordinator>>,
    body: Result<Json<RotateRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<crate::rotation::CaStatus>, Failure> {
    let Json(req) = body.map_err(|e| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!(
                "invalid rotation request: {}; give step = begin or finish",
                e.body_text()
            ),
        )
    })?;
    crate::rotation::step(&c, req.step, req.force)
        .map(Json)
        .map_err(|e| {
            let status = match e {
                crate::rotation::RotationError::NodesWaiting { .. }
                | crate::rotation::RotationError::NotRotating => StatusCode::CONFLICT,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            Failure(status, e.to_string())
        })
}
