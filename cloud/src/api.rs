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
use crate::store::{LinkRecord, NodeRecord, StoreError};
use tidemill_proto::NodeForecast;

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
    Ok(out)
}
