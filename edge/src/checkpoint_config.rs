//! `[checkpoint]` of the edge's config: how checkpoints move with their
//! jobs, and which backend keeps them between a job's tasks (the
//! coordinator, or the operators' shared store), checked at load.

use std::path::PathBuf;

use serde::Deserialize;

/// `[checkpoint]`: how checkpoints move with their jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointConfig {
    /// Complete checkpoints kept per job in the edge's store.
    pub keep: usize,
    /// Largest checkpoint sent or fetched, bytes.
    pub max_bytes: u64,
    /// Share of the coordinator link's measured rate a transfer may use.
    pub link_share: f64,
    /// Wall seconds a transfer may take before the task goes on without it.
    pub transfer_timeout_secs: u64,
}

impl CheckpointConfig {
    /// Why the settings are unusable, if they are: (key, value, rule).
    pub fn problem(&self) -> Option<(&'static str, String, &'static str)> {
        if self.keep == 0 || self.max_bytes == 0 || self.transfer_timeout_secs == 0 {
            return Some((
                "checkpoint",
                format!(
                    "keep {}, max_bytes {}, transfer_timeout_secs {}",
                    self.keep, self.max_bytes, self.transfer_timeout_secs
                ),
                "each must be at least 1",
            ));
        }
        if !(self.link_share > 0.0 && self.link_share <= 1.0) {
            return Some((
                "checkpoint.link_share",
                self.link_share.to_string(),
                "must be above 0 and at most 1",
            ));
        }
        None
    }
}

/// Where a job's checkpoints are kept between its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The coordinator keeps them; edges send and fetch them over their
    /// mutual-TLS links (`crate::checkpoint_move`).
    Coordinator,
    /// The operators' shared store at `[checkpoint] url`.
    Shared,
}

/// `[checkpoint]` as written: how checkpoints move, and where they are kept.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointToml {
    keep: usize,
    max_bytes: u64,
    link_share: f64,
    transfer_timeout_secs: u64,
    backend: Backend,
    url: String,
}

/// `[checkpoint]`: the transfer settings, and the backend that keeps
/// checkpoints between a job's tasks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "CheckpointToml")]
pub struct CheckpointTable {
    /// How transfers go, whatever the backend.
    pub moves: CheckpointConfig,
    /// Where checkpoints are kept.
    pub backend: Backend,
    /// The shared store's URL (`file:///path`, or an absolute path), for
    /// backend "shared".
    pub url: String,
}

impl From<CheckpointToml> for CheckpointTable {
    fn from(t: CheckpointToml) -> Self {
        CheckpointTable {
            moves: CheckpointConfig {
                keep: t.keep,
                max_bytes: t.max_bytes,
                link_share: t.link_share,
                transfer_timeout_secs: t.transfer_timeout_secs,
            },
            backend: t.backend,
            url: t.url,
        }
    }
}

impl CheckpointTable {
    /// Why the settings are unusable, if they are: (key, value, rule).
    pub fn problem(&self) -> Option<(&'static str, String, &'static str)> {
        if let Some(p) = self.moves.problem() {
            return Some(p);
        }
        let url = || format!("{:?}", self.url);
        match (self.backend, self.url.trim().is_empty()) {
            (Backend::Coordinator, true) => None,
            (Backend::Coordinator, false) => Some((
                "checkpoint.url",
                url(),
                "is used only with backend = \"shared\": set backend = \"shared\" to keep checkpoints there, or leave url empty",
            )),
            (Backend::Shared, true) => Some((
                "checkpoint.url",
                url(),
                "must name the shared store when backend = \"shared\", as file:///mnt/tidemill-checkpoints (a local or NFS path every edge mounts at the same place)",
            )),
            (Backend::Shared, false) => local_path(&self.url)
                .err()
                .map(|rule| ("checkpoint.url", url(), rule)),
        }
    }
}

/// The directory a shared-store URL names, or the rule it breaks.
pub fn local_path(url: &str) -> Result<PathBuf, &'static str> {
    let url = url.trim();
    let path = match url.split_once("://") {
        Some(("file", rest)) => rest,
        Some(_) => {
            return Err(
                "names a store this edge is not built to reach: only a local or NFS path is supported (S3, GCS and Azure are not built in); mount the share and give its path, as file:///mnt/tidemill-checkpoints",
            );
        }
        None => url,
    };
    if !path.starts_with('/') {
        return Err(
            "must be an absolute path, as file:///mnt/tidemill-checkpoints or /mnt/tidemill-checkpoints (file://host/path is not supported)",
        );
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(backend: Backend, url: &str) -> CheckpointTable {
        CheckpointTable {
            moves: CheckpointConfig {
                keep: 2,
                max_bytes: 1 << 30,
                link_share: 0.5,
                transfer_timeout_secs: 600,
            },
            backend,
            url: url.into(),
        }
    }

    #[test]
    fn a_bad_shared_url_is_a_config_error_naming_the_key_and_the_fix() {
        for ok in ["file:///srv/ck", "/srv/ck", " file:///mnt/nfs/ck "] {
            assert_eq!(table(Backend::Shared, ok).problem(), None, "{ok}");
        }
        assert_eq!(table(Backend::Coordinator, "").problem(), None);
        for (backend, url, says) in [
            (Backend::Shared, "", "must name the shared store"),
            (Backend::Shared, "s3://bucket/ck", "mount the share"),
            (Backend::Shared, "gs://bucket", "not built in"),
            (Backend::Shared, "relative/ck", "absolute path"),
            (Backend::Shared, "file://host/ck", "absolute path"),
            (
                Backend::Coordinator,
                "file:///srv/ck",
                "backend = \"shared\"",
            ),
        ] {
            let (key, value, rule) = table(backend, url).problem().expect(url);
            assert_eq!(key, "checkpoint.url");
            assert!(value.contains(url.trim()), "{value}");
            assert!(rule.contains(says), "{url}: {rule}");
        }
    }
}
