//! The `nodes` subcommands for node trust: accepting a refused capability
//! claim, labels, and the lines `nodes` prints under a node about its
//! standing (labels, a cordon's reason, a refused claim).

use super::{ApiArgs, Outcome, print_json};
use crate::store::{Acceptance, NodeRecord};

/// `nodes accept-capabilities ID`.
pub(super) fn accept_capabilities(id: &str, api: &ApiArgs) -> Outcome {
    let outcome = api.client()?.accept_capabilities(id)?;
    if api.json {
        return print_json(&outcome);
    }
    if let Acceptance::Accepted { capabilities: c } = outcome {
        println!(
            "node {id}: capabilities accepted ({} cores, {:.1} GiB, {} accelerator(s)); its next hello is welcomed",
            c.cpu_cores,
            c.mem_bytes as f64 / (1u64 << 30) as f64,
            c.accelerators.len()
        );
    }
    Ok(())
}

/// `nodes label ID LABEL` (`on`) and `nodes unlabel ID LABEL`.
pub(super) fn label(id: &str, label: &str, on: bool, api: &ApiArgs) -> Outcome {
    let labels = api.client()?.label(id, label, on)?;
    if api.json {
        return print_json(&labels);
    }
    println!("node {id}: labels [{}]", labels.labels.join(", "));
    Ok(())
}

/// The lines under a node in `nodes` that say how far it is trusted, if
/// there is anything to say.
pub(super) fn print_standing(n: &NodeRecord) {
    let t = &n.trust;
    if !t.labels.is_empty() {
        println!("    labels: {}", t.labels.join(", "));
    }
    if let Some(reason) = &t.cordon_reason {
        println!("    {reason}");
    }
    if let Some(c) = &t.refused_claim {
        println!(
            "    refused hello claiming {} cores, {:.1} GiB, {} accelerator(s); shown above is what it joined with; `tidemill-cloud nodes accept-capabilities {}` accepts the claim",
            c.cpu_cores,
            c.mem_bytes as f64 / (1u64 << 30) as f64,
            c.accelerators.len(),
            n.id
        );
    }
}
