//! Loading TOML configuration files with errors that name the file, the key and
//! the fix.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}; check the path given to --config")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this program, or has an unknown key.
    #[error(
        "config file {path} is invalid: {message}\nrun `print-default-config` for every valid key"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, which names the key and line.
        message: String,
    },
    /// A value in a table is out of range.
    #[error("config key `{table}.{key}` = {value} is invalid: {rule}")]
    InvalidInTable {
        /// The table.
        table: &'static str,
        /// The key within it.
        key: &'static str,
        /// The offending value.
        value: String,
        /// What the value must satisfy.
        rule: &'static str,
    },
    /// A value is out of range.
    #[error("config key `{key}` = {value} is invalid: {rule}")]
    Invalid {
        /// The key, dotted for nested tables.
        key: &'static str,
        /// The offending value.
        value: String,
        /// What the value must satisfy.
        rule: &'static str,
    },
}

/// Parses a program's embedded default config. The text ships in the binary
/// and each program's tests check that it parses, so failure is a build bug.
pub fn embedded_default<T: DeserializeOwned>(text: &str) -> T {
    parse(text, Path::new("<embedded default>"))
        .expect("the embedded default config parses (checked by a unit test)")
}

/// Loads the config file at `path`, or the embedded default `text` without one.
pub fn load_or_default<T: DeserializeOwned>(
    path: Option<&Path>,
    text: &str,
) -> Result<T, ConfigError> {
    match path {
        Some(p) => load(p),
        None => parse(text, Path::new("<embedded default>")),
    }
}

/// Parses a TOML file into `T`.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// Parses TOML text into `T`; `origin` names where the text came from.
pub fn parse<T: DeserializeOwned>(text: &str, origin: &Path) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: origin.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Demo {
        interval_secs: u64,
    }

    #[test]
    fn names_the_unknown_key() {
        let err = parse::<Demo>("interval_sec = 3", Path::new("x.toml")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("x.toml") && text.contains("interval_sec"),
            "{text}"
        );
    }

    #[test]
    fn names_a_missing_file() {
        let err = load::<Demo>(Path::new("/nonexistent/edge.toml")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/edge.toml"));
    }
}
