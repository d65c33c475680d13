//! The local admin credential: the token the coordinator writes to
//! `<data_dir>/admin-token` (0600) on first start, which the CLI on the
//! coordinator's host reads by itself when it is given no token, as
//! `k3s kubectl` reads its kubeconfig. Being on the host is not enough: the
//! caller must be able to read the file (the coordinator's user, or root).

use std::path::{Path, PathBuf};

use crate::auth::ADMIN_TOKEN_FILE;
use crate::config::CloudConfig;

/// The config an installed coordinator reads (deploy/install.sh writes it),
/// used to find the data dir when the CLI is given neither `--data-dir` nor
/// `--config`.
pub const INSTALLED_CONFIG: &str = "/etc/tidemill/cloud.toml";

/// Why the local admin token could not be read. The text names the file,
/// never its content.
#[derive(Debug, thiserror::Error)]
pub enum LocalAdminError {
    /// The config that names the data dir could not be read.
    #[error("cannot find the coordinator's data dir: {0}; pass --data-dir")]
    Config(#[from] tidemill_runtime::config_file::ConfigError),
    /// The token file could not be read.
    #[error(
        "cannot read the local admin token {}: {source}{}",
        .path.display(),
        if .source.kind() == std::io::ErrorKind::PermissionDenied {
            " (it is the coordinator's, mode 0600: run as its user or root)"
        } else {
            ""
        }
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The token file holds no token.
    #[error("the local admin token file {} is empty", .0.display())]
    Empty(PathBuf),
}

/// The admin token in `data_dir`.
pub fn read_token(data_dir: &Path) -> Result<String, LocalAdminError> {
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    // Absolute, so that an error names the file whatever the working dir.
    let path = std::path::absolute(&path).unwrap_or(path);
    let text = std::fs::read_to_string(&path).map_err(|source| LocalAdminError::Unreadable {
        path: path.clone(),
        source,
    })?;
    match text.trim() {
        "" => Err(LocalAdminError::Empty(path)),
        token => Ok(token.to_string()),
    }
}

/// The coordinator's data dir as the CLI sees it: `data_dir` if given, else
/// the one in `config` (or in [`INSTALLED_CONFIG`] where it exists, or the
/// default), with the `TIDEMILL_*` overrides `serve` would apply.
pub fn data_dir(
    data_dir: Option<&Path>,
    config: Option<&Path>,
) -> Result<PathBuf, LocalAdminError> {
    if let Some(dir) = data_dir {
        return Ok(dir.to_path_buf());
    }
    let installed = Path::new(INSTALLED_CONFIG);
    let config = config.or_else(|| installed.exists().then_some(installed));
    Ok(CloudConfig::load(config)?.data_dir)
}

/// The token the CLI sends: `given` (--api-token or TIDEMILL_API_TOKEN), else
/// the local admin token. The error says where it looked, for the message
/// the CLI shows if the API then wants a token.
pub fn token(
    given: Option<&str>,
    dir: Option<&Path>,
    config: Option<&Path>,
) -> Result<String, LocalAdminError> {
    match given {
        Some(token) => Ok(token.to_string()),
        None => read_token(&data_dir(dir, config)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_the_data_dir_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let missing = token(None, Some(dir.path()), None).unwrap_err().to_string();
        assert!(missing.contains("admin-token"), "{missing}");
        std::fs::write(dir.path().join(ADMIN_TOKEN_FILE), "\n").unwrap();
        let empty = token(None, Some(dir.path()), None).unwrap_err().to_string();
        assert!(empty.contains("is empty"), "{empty}");
        std::fs::write(dir.path().join(ADMIN_TOKEN_FILE), "tmaX.secret\n").unwrap();
        assert_eq!(token(None, Some(dir.path()), None).unwrap(), "tmaX.secret");
        assert_eq!(
            token(Some("given"), Some(dir.path()), None).unwrap(),
            "given"
        );
    }
}
