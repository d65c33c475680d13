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
    /// The API is not on this host: the local admin token goes nowhere else.
    #[error("the local admin token is sent only to an API on this host (loopback), not to {0}")]
    NotLocal(String),
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

/// Whether the API at URL `api` is on this host: its host is `localhost` or
/// a loopback address.
pub fn is_local(api: &str) -> bool {
    let rest = api.split_once("://").map_or(api, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The token the CLI sends to the API at `api`: `given` (--api-token or
/// TIDEMILL_API_TOKEN), else the local admin token, which goes only to an
/// API on this host. The error says where it looked, for the message the CLI
/// shows if the API then wants a token.
pub fn token(
    api: &str,
    given: Option<&str>,
    dir: Option<&Path>,
    config: Option<&Path>,
) -> Result<String, LocalAdminError> {
    match given {
        Some(token) => Ok(token.to_string()),
        None if !is_local(api) => Err(LocalAdminError::NotLocal(api.to_string())),
        None => read_token(&data_dir(dir, config)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: &str = "http://127.0.0.1:7480";

    #[test]
    fn the_token_is_read_from_the_data_dir_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let read = |api| token(api, None, Some(dir.path()), None);
        let missing = read(LOCAL).unwrap_err().to_string();
        assert!(missing.contains("admin-token"), "{missing}");
        std::fs::write(dir.path().join(ADMIN_TOKEN_FILE), "\n").unwrap();
        let empty = read(LOCAL).unwrap_err().to_string();
        assert!(empty.contains("is empty"), "{empty}");
        std::fs::write(dir.path().join(ADMIN_TOKEN_FILE), "tmaX.secret\n").unwrap();
        assert_eq!(read(LOCAL).unwrap(), "tmaX.secret");
        let given = token(LOCAL, Some("given"), Some(dir.path()), None);
        assert_eq!(given.unwrap(), "given");
        let remote = read("https://coord.example.com:7480").unwrap_err();
        assert!(matches!(remote, LocalAdminError::NotLocal(_)), "{remote}");
        assert!(!remote.to_string().contains("secret"));
    }

    #[test]
    fn only_loopback_apis_are_local() {
        for api in [
            "http://127.0.0.1:7480",
            "https://localhost:7480/",
            "http://127.0.0.2",
            "https://[::1]:7480",
            "127.0.0.1:7480",
        ] {
            assert!(is_local(api), "{api}");
        }
        for api in [
            "https://coord.example.com:7480",
            "http://10.0.0.1:7480",
            "https://[2001:db8::1]:7480",
            "http://127.0.0.1.evil.example:7480",
            "http://localhost.evil.example",
        ] {
            assert!(!is_local(api), "{api}");
        }
    }
}
