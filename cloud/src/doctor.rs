//! `tidemill-cloud doctor`: checks what the coordinator needs, each printed
//! as ok, warn or fail with the sentence that fixes it.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;

use tidemill_runtime::datadir;
use tidemill_runtime::doctor::{self, Report};
use tidemill_runtime::tls::CA_CERT_FILE;

use crate::config::CloudConfig;

/// Days before expiry that the CA is worth a warning: rotating it takes every
/// edge a renewal.
const CA_WARN_DAYS: i64 = 180;
/// Days before expiry that the server certificate is worth a warning (the
/// coordinator renews it itself at start).
const SERVER_WARN_DAYS: i64 = 14;
/// The server certificate in the data dir.
const SERVER_CERT_FILE: &str = "server.pem";

/// Runs every check on `cfg` (already loaded and validated) and prints them.
pub fn run(cfg: &CloudConfig, source: &str) -> Report {
    let mut report = Report::default();
    report.ok("config", format!("{source} loads and validates"));
    let now_ms = chrono::Utc::now().timestamp_millis();
    let dir = &cfg.data_dir;
    doctor::data_dir(&mut report, dir);
    let running = datadir::holder(dir);
    match &running {
        Some(holder) => report.ok(
            "daemon",
            format!("tidemill-cloud runs on this data dir ({holder})"),
        ),
        None => report.warn(
            "daemon",
            "no tidemill-cloud runs on this data dir",
            "start it: systemctl start tidemill-cloud",
        ),
    }
    store(&mut report, cfg);
    let cas = doctor::certificate_file(
        &mut report,
        "CA",
        &dir.join(CA_CERT_FILE),
        now_ms,
        CA_WARN_DAYS,
        "plan a CA rotation (`tidemill-cloud ca rotate begin`, then `finish` once every edge renewed)",
    );
    let server = doctor::certificate_file(
        &mut report,
        "server cert",
        &dir.join(SERVER_CERT_FILE),
        now_ms,
        SERVER_WARN_DAYS,
        "restart the coordinator: it renews its server certificate at start",
    );
    if let (Some(cas), Some(server)) = (cas, server) {
        let failed: Vec<String> = cfg
            .tls_names
            .iter()
            .filter_map(|name| {
                doctor::verify_server(&server[0], &cas, name, now_ms)
                    .err()
                    .map(|e| format!("{name}: {e}"))
            })
            .collect();
        if failed.is_empty() {
            report.ok(
                "server cert",
                format!("issued by the CA for {}", cfg.tls_names.join(", ")),
            );
        } else {
            report.fail(
                "server cert",
                format!("does not verify for {}", failed.join("; ")),
                "tls_names changed after the certificate was made: see tls_names in `tidemill-cloud print-default-config` for how to make a new one",
            );
        }
    }
    let ours = running.as_deref();
    listener(
        &mut report,
        "QUIC listen",
        cfg.quic_listen,
        Proto::Udp,
        ours,
    );
    listener(&mut report, "API listen", cfg.api_listen, Proto::Tcp, ours);
    api(&mut report, cfg);
    doctor::clock(&mut report);
    report
}

/// The store opens, and a write transaction can start. Only as the owner of
/// the database: SQLite run as root could leave root-owned journal files
/// that the coordinator's user cannot open.
fn store(report: &mut Report, cfg: &CloudConfig) {
    if cfg.store.backend == crate::config::StoreBackend::Postgres {
        return postgres_store(report, cfg);
    }
    let path = cfg.data_dir.join(crate::store::DB_FILE);
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(_) => {
            report.warn(
                "store",
                format!("{} does not exist yet", path.display()),
                "start the coordinator: it creates the store",
            );
            return;
        }
    };
    let uid = nix::unistd::Uid::effective().as_raw();
    if meta.uid() != uid {
        report.warn(
            "store",
            format!("{} belongs to uid {}, not this user (uid {uid}): not opened", path.display(), meta.uid()),
            "run doctor as the coordinator's user: sudo -u tidemill tidemill-cloud doctor --config /etc/tidemill/cloud.toml",
        );
        return;
    }
    let checked =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .and_then(|conn| {
                conn.busy_timeout(std::time::Duration::from_secs(5))?;
                let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
                conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")?;
                Ok(version)
            });
    match checked {
        Ok(version) => report.ok(
            "store",
            format!("{} opens and takes writes (schema {version})", path.display()),
        ),
        Err(e) => report.fail(
            "store",
            format!("{}: {e}", path.display()),
            "check the file's owner and the disk; restore the data dir from backup if the database is damaged",
        ),
    }
}

/// The PostgreSQL database answers, holds a schema this build knows, and
/// takes a write transaction; says which replica leads.
fn postgres_store(report: &mut Report, cfg: &CloudConfig) {
    use crate::store::db::{Connection, Query};
    let shown = tidemill_runtime::config_file::redact_url(&cfg.store.url);
    let checked = Connection::postgres_as_is(&cfg.store.url).and_then(|mut conn| {
        let version: i64 =
            conn.query_row("SELECT version FROM tidemill_schema", [], |r| r.get(0))?;
        let leader: Option<(String, i64)> = conn
            .query_row(
                "SELECT holder, epoch FROM leader_lease WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ok();
        conn.transaction()?.commit()?;
        Ok((version, leader))
    });
    match checked {
        Ok((version, _)) if version as usize > crate::store::PG_SCHEMA_VERSION => report.fail(
            "store",
            format!(
                "PostgreSQL at {shown} has schema version {version}, newer than the {} this build knows",
                crate::store::PG_SCHEMA_VERSION
            ),
            "run a newer tidemill-cloud, or restore a backup",
        ),
        Ok((version, leader)) => {
            let leads = leader.map_or("no replica has led yet".to_string(), |(who, epoch)| {
                format!("replica {who} holds the lease (epoch {epoch})")
            });
            report.ok(
                "store",
                format!("PostgreSQL at {shown} answers and takes writes (schema {version}); {leads}"),
            );
        }
        Err(e) => report.fail(
            "store",
            format!("PostgreSQL at {shown}: {e}"),
            "check [store] url (or TIDEMILL_STORE__URL), that the database runs and this host may reach it, and its password; start a coordinator once to create the schema",
        ),
    }
}

enum Proto {
    Udp,
    Tcp,
}

/// A listen address is free, or held by this data dir's coordinator.
fn listener(
    report: &mut Report,
    name: &'static str,
    addr: SocketAddr,
    proto: Proto,
    running: Option<&str>,
) {
    let bound = match proto {
        Proto::Udp => std::net::UdpSocket::bind(addr).map(drop),
        Proto::Tcp => std::net::TcpListener::bind(addr).map(drop),
    };
    let kind = match proto {
        Proto::Udp => "UDP",
        Proto::Tcp => "TCP",
    };
    match (bound, running) {
        (Ok(()), _) => report.ok(name, format!("{kind} {addr} is free to bind")),
        (Err(e), Some(holder)) if e.kind() == std::io::ErrorKind::AddrInUse => report.ok(
            name,
            format!("{kind} {addr} is in use, by this coordinator ({holder})"),
        ),
        (Err(e), _) => report.fail(
            name,
            format!("cannot bind {kind} {addr}: {e}"),
            "free the port (ss -lpn shows its holder) or listen elsewhere; an address must be one of this machine's",
        ),
    }
}

/// The API's transport and the admin token's file.
fn api(report: &mut Report, cfg: &CloudConfig) {
    if cfg.api.tls {
        report.ok(
            "API TLS",
            format!(
                "HTTPS on {} with the server certificate; clients pass --api-ca {}",
                cfg.api_listen,
                cfg.data_dir.join(CA_CERT_FILE).display()
            ),
        );
    } else {
        report.ok(
            "API TLS",
            format!("plain HTTP on loopback {} only", cfg.api_listen),
        );
    }
    let token = cfg.data_dir.join(crate::auth::ADMIN_TOKEN_FILE);
    if let Ok(meta) = std::fs::metadata(&token)
        && meta.mode() & 0o077 != 0
    {
        report.fail(
            "admin token",
            format!(
                "{} is readable by others (mode {:o})",
                token.display(),
                meta.mode() & 0o777
            ),
            format!("chmod 600 {}", token.display()),
        );
    }
}
