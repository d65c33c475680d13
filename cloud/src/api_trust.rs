//! The API's node-trust endpoints, all admin scope (every POST under
//! `/v1/nodes/` is): accepting a node's larger capability claim, and giving
//! or taking away node labels, which only an admin sets.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::api::{Failure, no_such_node};
use crate::coordinator::Coordinator;
use crate::store::Acceptance;
use crate::trust::label_problem;

/// The answer to `nodes label` and `nodes unlabel`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Labels {
    /// The node.
    pub node_id: String,
    /// Its labels now.
    pub labels: Vec<String>,
}

/// Makes the node's refused capability claim its record.
pub(crate) async fn accept_capabilities(
    State(c): State<Arc<Coordinator>>,
    Path(id): Path<String>,
) -> Result<Json<Acceptance>, Failure> {
    let now = c.clock.now_ms();
    let outcome = c.store.lock().unwrap().accept_capabilities(&id, now)?;
    match &outcome {
        Acceptance::UnknownNode => return Err(no_such_node(&id)),
        Acceptance::NothingPending => {
            return Err(Failure(
                StatusCode::CONFLICT,
                format!(
                    "node {id} has no refused capability claim to accept; `tidemill-cloud nodes` shows one when a hello is refused"
                ),
            ));
        }
        Acceptance::Accepted { capabilities } => {
            tracing::warn!(node_id = %id, ?capabilities, "capabilities accepted by an admin");
        }
    }
    Ok(Json(outcome))
}

/// Gives the node a label.
pub(crate) async fn label(
    State(c): State<Arc<Coordinator>>,
    Path((id, label)): Path<(String, String)>,
) -> Result<Json<Labels>, Failure> {
    set(&c, id, label, true)
}

/// Takes a label from the node.
pub(crate) async fn unlabel(
    State(c): State<Arc<Coordinator>>,
    Path((id, label)): Path<(String, String)>,
) -> Result<Json<Labels>, Failure> {
    set(&c, id, label, false)
}

fn set(c: &Coordinator, id: String, label: String, on: bool) -> Result<Json<Labels>, Failure> {
    if let Some(why) = label_problem(&label) {
        return Err(Failure(StatusCode::BAD_REQUEST, why));
    }
    let now = c.clock.now_ms();
    let labels = c
        .store
        .lock()
        .unwrap()
        .set_label(&id, &label, on, now)?
        .ok_or_else(|| no_such_node(&id))?;
    tracing::info!(node_id = %id, %label, on, "node label changed by an admin");
    c.wake.notify_one();
    Ok(Json(Labels {
        node_id: id,
        labels,
    }))
}
