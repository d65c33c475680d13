//! What a node may claim in a hello: no more than it showed when it joined.
//! Capabilities are fixed at join (the first hello after the certificate is
//! issued); a later claim of more cores, memory, accelerators or a different
//! accelerator model is refused until an admin accepts it
//! (`tidemill-cloud nodes accept-capabilities ID`). A claim of less or the
//! same is accepted: a GPU may fail.

use tidemill_proto::Capabilities;

/// Each way `claimed` goes beyond `recorded`, in words ("cpu_cores 256 >
/// 2"); empty when it does not.
pub fn excess(claimed: &Capabilities, recorded: &Capabilities) -> Vec<String> {
    let mut over = Vec::new();
    if claimed.cpu_cores > recorded.cpu_cores {
        over.push(format!(
            "cpu_cores {} > {}",
            claimed.cpu_cores, recorded.cpu_cores
        ));
    }
    if claimed.mem_bytes > recorded.mem_bytes {
        over.push(format!(
            "mem_bytes {} > {}",
            claimed.mem_bytes, recorded.mem_bytes
        ));
    }
    // Every claimed accelerator must match a recorded one of the same model
    // and kind with at least its memory, each recorded one used once.
    let mut left: Vec<_> = recorded.accelerators.iter().collect();
    let mut extra: Vec<&str> = Vec::new();
    for a in &claimed.accelerators {
        let found = left.iter().position(|r| {
            r.model == a.model
                && r.kind == a.kind
                && a.mem_bytes.unwrap_or(0) <= r.mem_bytes.unwrap_or(0)
        });
        match found {
            Some(i) => {
                left.swap_remove(i);
            }
            None => extra.push(&a.model),
        }
    }
    if !extra.is_empty() {
        let count = extra.len();
        extra.dedup();
        over.push(format!(
            "{count} accelerator(s) beyond the {} recorded ({})",
            recorded.accelerators.len(),
            extra.join(", ")
        ));
    }
    over
}

#[cfg(test)]
mod tests {
    use tidemill_proto::{Accelerator, AcceleratorKind};

    use super::*;

    fn caps(cores: u32, gpus: &[&str]) -> Capabilities {
        Capabilities {
            cpu_cores: cores,
            mem_bytes: 8 << 30,
            accelerators: gpus
                .iter()
                .map(|m| Accelerator {
                    kind: AcceleratorKind::NvidiaGpu,
                    model: m.to_string(),
                    mem_bytes: Some(16 << 30),
                })
                .collect(),
            os: "linux".into(),
            arch: "x86_64".into(),
            daemon_version: "1".into(),
        }
    }

    #[test]
    fn more_or_better_is_an_excess_and_less_or_the_same_is_not() {
        let joined = caps(8, &["Tesla T4", "Tesla T4"]);
        assert!(excess(&joined, &joined).is_empty());
        assert!(
            excess(&caps(4, &["Tesla T4"]), &joined).is_empty(),
            "a GPU failed"
        );
        assert_eq!(excess(&caps(256, &[]), &joined), ["cpu_cores 256 > 8"]);
        let three = excess(&caps(8, &["Tesla T4", "Tesla T4", "Tesla T4"]), &joined);
        assert_eq!(three.len(), 1, "{three:?}");
        let better = excess(&caps(8, &["A100-SXM4-80GB"]), &joined);
        assert!(better[0].contains("A100"), "{better:?}");
        let mut more_mem = joined.clone();
        more_mem.mem_bytes *= 256;
        assert!(excess(&more_mem, &joined)[0].starts_with("mem_bytes"));
    }
}
