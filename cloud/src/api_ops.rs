//! The API's operations endpoints: readiness (which names the replica that
//! leads the rounds), the Prometheus scrape, and the leader's step-down.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::api::Failure;
use crate::coordinator::Coordinator;

/// Ready when the store answers and a scheduling round finished recently; a
/// 503 says why not.
pub(crate) async fn readyz(State(c): State<Arc<Coordinator>>) -> Response {
    match c.not_ready() {
        None => format!("ok: {}\n", c.leadership.describe()).into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

/// Prometheus text exposition (format 0.0.4) of [`crate::metrics`].
pub(crate) async fn metrics(State(c): State<Arc<Coordinator>>) -> Result<Response, Failure> {
    let connected = c.connected().len();
    let text = c.metrics.scrape(&c.store.lock().unwrap(), connected)?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            tidemill_runtime::metrics::CONTENT_TYPE,
        )],
        text,
    )
        .into_response())
}

/// What `POST /v1/leadership/step-down` did.
#[derive(Debug, Serialize)]
pub(crate) struct SteppedDown {
    /// The replica that gave the lease up.
    replica: String,
    /// The tenure it ended.
    epoch: i64,
}

/// Hands the scheduling rounds to another replica: this one must lead.
pub(crate) async fn step_down(
    State(c): State<Arc<Coordinator>>,
) -> Result<Json<SteppedDown>, Failure> {
    match c.leadership.step_down(&c.store)? {
        Some(epoch) => Ok(Json(SteppedDown {
            replica: c.leadership.replica().to_string(),
            epoch,
        })),
        None => Err(Failure(
            StatusCode::CONFLICT,
            format!(
                "{}; send the step-down to the replica that leads (its /readyz says so)",
                c.leadership.describe()
            ),
        )),
    }
}
