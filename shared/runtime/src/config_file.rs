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
    /// A `TIDEMILL_*` variable looks like a config key but names none.
    #[error(
        "environment variable {var} names no config key{}; `TIDEMILL_<KEY>` sets a top-level key and `TIDEMILL_<TABLE>__<KEY>` one in a table (`print-default-config` lists them): rename or unset it",
        if nearest.is_empty() { String::new() } else { format!(" (did you mean {nearest}?)") }
    )]
    UnknownEnv {
        /// The variable.
        var: String,
        /// The closest valid variable name, or empty.
        nearest: String,
    },
    /// A `TIDEMILL_*` variable's value does not fit its key's type.
    #[error("environment variable {var} = {value:?} (config key `{key}`) must be {expected}")]
    EnvType {
        /// The variable.
        var: String,
        /// The config key it sets, dotted.
        key: String,
        /// The offending value.
        value: String,
        /// What the key takes.
        expected: &'static str,
    },
    /// A `TIDEMILL_*` variable's value is not UTF-8.
    #[error("environment variable {var} is not valid UTF-8; set it to UTF-8 text")]
    EnvNotUnicode {
        /// The variable.
        var: String,
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

/// Parses TOML text into `T`; `origin` names where the text came from.
pub fn parse<T: DeserializeOwned>(text: &str, origin: &Path) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: origin.to_owned(),
        message: e.to_string(),
    })
}

/// The prefix of environment variables that override config keys.
pub const ENV_PREFIX: &str = "TIDEMILL_";

/// The environment variables under [`ENV_PREFIX`], as `(name, value)` pairs,
/// for [`load_layered`]. A value that is not UTF-8 is an error naming it.
pub fn prefixed_env() -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str().filter(|n| n.starts_with(ENV_PREFIX)) else {
            continue;
        };
        let value = value
            .into_string()
            .map_err(|_| ConfigError::EnvNotUnicode {
                var: name.to_string(),
            })?;
        vars.push((name.to_string(), value));
    }
    Ok(vars)
}

/// Loads a program's config in layers: the file at `path` (or the embedded
/// default `text` without one), then the `TIDEMILL_*` variables in `env`.
/// `TIDEMILL_<KEY>` sets a top-level key and `TIDEMILL_<TABLE>__<KEY>` a key in
/// a table (names are case-insensitive; arrays and tables take a TOML inline
/// value). Names in `reserved` belong to command-line flags and are skipped.
/// Returns the config and the effective TOML table it was read from.
pub fn load_layered<T: DeserializeOwned>(
    path: Option<&Path>,
    text: &str,
    reserved: &[&str],
    env: &[(String, String)],
) -> Result<(T, toml::Table), ConfigError> {
    let (own, origin) = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.to_owned(),
                source,
            })?;
            (Some(text), p)
        }
        None => (None, Path::new("<embedded default>")),
    };
    let mut table: toml::Table = parse(own.as_deref().unwrap_or(text), origin)?;
    let schema = documented_keys(text);
    for (var, raw) in env {
        if reserved.contains(&var.as_str()) {
            continue;
        }
        apply_env(&mut table, &schema, var, raw)?;
    }
    let config = toml::Value::Table(table.clone())
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            path: origin.to_owned(),
            message: format!(
                "{} (after the TIDEMILL_* environment overrides)",
                e.message()
            ),
        })?;
    Ok((config, table))
}

/// Every key a default config documents: its values, plus its commented-out
/// examples (`# key = value` lines and `# [table]` headers) uncommented.
fn documented_keys(text: &str) -> toml::Table {
    let example = |rest: &str| {
        let key_line = rest.split_once(" = ").is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        });
        let header = rest.starts_with('[') && rest.ends_with(']') && !rest.contains(' ');
        key_line || header
    };
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if example(rest) => rest,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    toml::from_str(&uncommented)
        .or_else(|_| toml::from_str(text))
        .unwrap_or_default()
}

/// Sets the key `var` names in `table`, typed as `schema` says; a variable
/// that names no key is an error only where it looks like one (it has a `__`
/// or is close to a key's name), as other tools' `TIDEMILL_*` variables may
/// share the environment.
fn apply_env(
    table: &mut toml::Table,
    schema: &toml::Table,
    var: &str,
    raw: &str,
) -> Result<(), ConfigError> {
    let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
        return Ok(());
    };
    let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    let Some(kind) = lookup(schema, &path) else {
        let mut names = Vec::new();
        env_names(schema, "", &mut names);
        let wanted = rest.to_ascii_uppercase();
        let nearest = names
            .into_iter()
            .map(|n| (strsim::levenshtein(&wanted, &n), n))
            .min();
        let close = nearest.as_ref().is_some_and(|(d, _)| *d <= 2);
        if !rest.contains("__") && !close {
            return Ok(());
        }
        return Err(ConfigError::UnknownEnv {
            var: var.to_string(),
            nearest: nearest.map_or_else(String::new, |(_, n)| format!("{ENV_PREFIX}{n}")),
        });
    };
    let key = path.join(".");
    let bad = |expected: &'static str| ConfigError::EnvType {
        var: var.to_string(),
        key: key.clone(),
        value: raw.to_string(),
        expected,
    };
    let value = match kind {
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        toml::Value::Integer(_) => {
            toml::Value::Integer(raw.trim().parse().map_err(|_| bad("an integer"))?)
        }
        toml::Value::Float(_) => toml::Value::Float(
            raw.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| bad("a number"))?,
        ),
        toml::Value::Boolean(_) => toml::Value::Boolean(match raw.trim() {
            "true" => true,
            "false" => false,
            _ => return Err(bad("true or false")),
        }),
        toml::Value::Array(_) | toml::Value::Table(_) | toml::Value::Datetime(_) => {
            let expected = match kind {
                toml::Value::Array(_) => "a TOML array such as [\"a\", \"b\"]",
                toml::Value::Table(_) => "a TOML inline table such as { key = \"value\" }",
                _ => "a TOML date-time",
            };
            let parsed: toml::Table =
                toml::from_str(&format!("v = {raw}")).map_err(|_| bad(expected))?;
            let v = parsed.get("v").cloned().ok_or_else(|| bad(expected))?;
            if v.type_str() != kind.type_str() {
                return Err(bad(expected));
            }
            v
        }
    };
    let (last, parents) = path
        .split_last()
        .expect("split yields one segment at least");
    let mut here = table;
    for segment in parents {
        here = here
            .entry(segment.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| bad("a key inside a table, but the config has a value here"))?;
    }
    here.insert(last.clone(), value);
    Ok(())
}

/// The schema's value at `path`, matched case-insensitively.
fn lookup<'a>(schema: &'a toml::Table, path: &[String]) -> Option<&'a toml::Value> {
    let (first, rest) = path.split_first()?;
    let value = schema
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(first))
        .map(|(_, v)| v)?;
    if rest.is_empty() {
        return Some(value);
    }
    lookup(value.as_table()?, rest)
}

/// The variable name (less the prefix) of every key and table in `schema`.
fn env_names(schema: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in schema {
        let name = format!("{prefix}{}", k.to_ascii_uppercase());
        if let toml::Value::Table(inner) = v {
            env_names(inner, &format!("{name}__"), out);
        }
        out.push(name);
    }
}

/// `url` with the password of its user info (`scheme://user:password@…`)
/// replaced by `<redacted>`: a database URL may carry one.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:<redacted>{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
}

/// Replaces the values of secret keys (`token`, `*_token`, `*secret*`,
/// `*password*`) with `<redacted>`, and the password in a `url` or `*_url`,
/// so an effective config can be shown.
pub fn redact(table: &mut toml::Table) {
    for (k, v) in table.iter_mut() {
        match v {
            toml::Value::Table(inner) => redact(inner),
            toml::Value::String(s) if k == "url" || k.ends_with("_url") => *s = redact_url(s),
            toml::Value::String(s)
                if !s.is_empty()
                    && (k == "token"
                        || k.ends_with("_token")
                        || k.contains("secret")
                        || k.contains("password")) =>
            {
                *s = "<redacted>".to_string();
            }
            _ => {}
        }
    }
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
        let err = load_layered::<Demo>(Some(Path::new("/nonexistent/edge.toml")), "", &[], &[])
            .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/edge.toml"));
    }

    const DEFAULT: &str = "# doc\nname = \"a\"\ncount = 3\nratio = 0.5\non = true\nlist = [\"x\"]\n\n[link]\nkeep_alive_secs = 5\ntoken = \"\"\n\n# [extra]\n# speed = 60.0\n";

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Layered {
        name: String,
        count: u64,
        ratio: f64,
        on: bool,
        list: Vec<String>,
        link: LinkPart,
        extra: Option<Extra>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct LinkPart {
        keep_alive_secs: u64,
        token: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Extra {
        speed: f64,
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn layered(pairs: &[(&str, &str)]) -> Result<Layered, ConfigError> {
        load_layered(None, DEFAULT, &["TIDEMILL_API"], &env(pairs)).map(|(c, _)| c)
    }

    #[test]
    fn env_overrides_every_kind_of_key_and_a_commented_example() {
        let c = layered(&[
            ("TIDEMILL_NAME", "b"),
            ("TIDEMILL_COUNT", "7"),
            ("TIDEMILL_RATIO", "2"),
            ("TIDEMILL_ON", "false"),
            ("TIDEMILL_LIST", "[\"y\", \"z\"]"),
            ("TIDEMILL_LINK__KEEP_ALIVE_SECS", "9"),
            ("TIDEMILL_EXTRA__SPEED", "60"),
        ])
        .unwrap();
        assert_eq!(
            (c.name.as_str(), c.count, c.ratio, c.on),
            ("b", 7, 2.0, false)
        );
        assert_eq!(c.list, ["y", "z"]);
        assert_eq!(c.link.keep_alive_secs, 9);
        assert_eq!(c.extra.unwrap().speed, 60.0);
    }

    #[test]
    fn env_overrides_the_file_not_the_other_way() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, DEFAULT.replace("count = 3", "count = 4")).unwrap();
        let (c, _): (Layered, _) = load_layered(Some(&file), DEFAULT, &[], &[]).unwrap();
        assert_eq!(c.count, 4);
        let (c, _): (Layered, _) =
            load_layered(Some(&file), DEFAULT, &[], &env(&[("TIDEMILL_COUNT", "5")])).unwrap();
        assert_eq!(c.count, 5);
    }

    #[test]
    fn a_type_error_names_the_variable_and_the_key() {
        let text = layered(&[("TIDEMILL_LINK__KEEP_ALIVE_SECS", "five")])
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("TIDEMILL_LINK__KEEP_ALIVE_SECS")
                && text.contains("link.keep_alive_secs")
                && text.contains("integer"),
            "{text}"
        );
        let text = layered(&[("TIDEMILL_ON", "yes")]).unwrap_err().to_string();
        assert!(
            text.contains("TIDEMILL_ON") && text.contains("true or false"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_key_like_variable_names_the_nearest_valid_one() {
        let text = layered(&[("TIDEMILL_LINK__KEEP_ALIVE_SEC", "9")])
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("TIDEMILL_LINK__KEEP_ALIVE_SEC ")
                && text.contains("did you mean TIDEMILL_LINK__KEEP_ALIVE_SECS?"),
            "{text}"
        );
        let text = layered(&[("TIDEMILL_COUNTS", "9")])
            .unwrap_err()
            .to_string();
        assert!(text.contains("TIDEMILL_COUNT?"), "{text}");
    }

    #[test]
    fn unrelated_and_reserved_variables_are_left_alone() {
        let c = layered(&[
            ("TIDEMILL_CHECKPOINT_DIR", "/x"),
            ("TIDEMILL_API", "http://127.0.0.1:7480"),
        ])
        .unwrap();
        assert_eq!(c.count, 3);
    }

    #[test]
    fn a_urls_password_is_redacted_and_the_rest_kept() {
        assert_eq!(
            redact_url("postgres://tm:s3cr@t@db.example:5432/tidemill?sslmode=require"),
            "postgres://tm:<redacted>@db.example:5432/tidemill?sslmode=require"
        );
        assert_eq!(redact_url("postgres://tm@db/x"), "postgres://tm@db/x");
        assert_eq!(redact_url("postgres://db/x?a=b@c"), "postgres://db/x?a=b@c");
        let mut table: toml::Table =
            toml::from_str("[store]\nurl = \"postgres://u:pw@h/d\"").unwrap();
        redact(&mut table);
        assert_eq!(
            table["store"]["url"].as_str(),
            Some("postgres://u:<redacted>@h/d")
        );
    }

    #[test]
    fn redact_hides_secrets_only() {
        let (_, mut table): (Layered, _) = load_layered(
            None,
            DEFAULT,
            &[],
            &env(&[("TIDEMILL_LINK__TOKEN", "s3cret")]),
        )
        .unwrap();
        redact(&mut table);
        let shown = toml::to_string(&table).unwrap();
        assert!(
            !shown.contains("s3cret") && shown.contains("<redacted>"),
            "{shown}"
        );
        assert!(shown.contains("name = \"a\""), "{shown}");
    }
}
