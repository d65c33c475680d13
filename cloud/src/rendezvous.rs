//! The environment a distributed training job needs to find its peers, in the
//! form torchrun and `torch.distributed` read: each task's `RANK`, the
//! `WORLD_SIZE`, and where rank 0 listens (`MASTER_ADDR`, `MASTER_PORT`).
//! A task is one node's share of the job; `TIDEMILL_WORKERS` says how many
//! devices it has there (torchrun's `--nproc-per-node`).

use std::collections::BTreeMap;

/// The variables tidemill sets; a job's own `[env]` cannot override them,
/// because they must describe the placement tidemill actually made.
pub const KEYS: [&str; 6] = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TIDEMILL_WORKERS",
];

/// Sets the rendezvous variables for the task of rank `rank` out of `world`
/// tasks, using `workers` devices on its node, with rank 0 listening on
/// `master_addr:master_port`.
pub fn apply(
    env: &mut BTreeMap<String, String>,
    rank: u32,
    world: u32,
    workers: u32,
    master_addr: &str,
    master_port: u16,
) {
    let values = [
        rank.to_string(),
        "0".to_string(),
        world.to_string(),
        master_addr.to_string(),
        master_port.to_string(),
        workers.to_string(),
    ];
    for (key, value) in KEYS.iter().zip(values) {
        env.insert((*key).to_string(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_every_key_and_overrides_the_jobs_own() {
        let mut env: BTreeMap<String, String> = [
            ("RANK".to_string(), "7".to_string()),
            ("EPOCHS".to_string(), "3".to_string()),
        ]
        .into();
        apply(&mut env, 2, 4, 8, "10.0.0.5", 29500);
        let get = |env: &BTreeMap<String, String>, k: &str| env.get(k).cloned().unwrap_or_default();
        let all = |env: &BTreeMap<String, String>| KEYS.map(|k| get(env, k));
        assert_eq!(all(&env), ["2", "0", "4", "10.0.0.5", "29500", "8"]);
        assert_eq!(get(&env, "EPOCHS"), "3", "the job's other variables stay");
    }
}
