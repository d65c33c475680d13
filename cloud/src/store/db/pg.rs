//! The PostgreSQL side of [`super::Handle`], on `tokio-postgres`.
//!
//! The store's API is synchronous: it is called with a std `Mutex` held,
//! from tokio tasks on the coordinator's multi-thread runtime and from plain
//! threads in tests. An async driver cannot be blocked on from there (a
//! `block_on` inside a runtime panics, and one that parks a worker starves
//! the connection it waits for), so each [`Client`] runs the driver on a
//! thread of its own, with a current-thread runtime that owns the
//! connection. Callers send it requests and wait for each answer at most
//! [`ANSWER_WAIT`]; the thread gives a statement at most [`STATEMENT_LIMIT`]
//! and closes a connection that ran past it (a hung network), and the
//! server cancels a statement past its `statement_timeout`, set below both.
//! The thread ends when its [`Client`] is dropped.
//!
//! The thread prepares each distinct SQL text once and keeps the prepared
//! statement; `?N` and `?` parameters are rewritten to PostgreSQL's `$N`.
//!
//! The connection URL is libpq's (`postgres://user:password@host:port/db`,
//! with options such as `sslmode` and `connect_timeout`). `sslmode=disable`
//! connects in plain text; `prefer` (the default) and `require` use TLS
//! through rustls, and whenever TLS is used the server's certificate must
//! chain to one of the system's CA roots or to a certificate in the PEM
//! file named by the environment variable `PGSSLROOTCERT` (libpq's name for
//! it). The URL holds the password, so it is never logged nor put in an
//! error.

#[path = "pg_types.rs"]
mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_postgres::config::SslMode;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Config, NoTls, Statement};

use super::{Error, Result, Value, ValueRef};
use wire::{Param, describe, from_driver, translate};

/// How long the driver thread gives one statement, or the connection
/// attempt, before it gives up on the connection.
const STATEMENT_LIMIT: Duration = Duration::from_secs(30);

/// The server's `statement_timeout`, below [`STATEMENT_LIMIT`] so that the
/// server cancels a slow statement before the driver drops the connection.
const SERVER_STATEMENT_TIMEOUT: &str = "25s";

/// How long a caller waits for the driver thread's answer: a little over
/// [`STATEMENT_LIMIT`], so that the thread's own timeout answers first.
const ANSWER_WAIT: Duration = Duration::from_secs(35);

/// The TCP connect timeout when the URL sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Prepared statements kept; past this (SQL built at run time), the cache
/// starts over.
const CACHE_LIMIT: usize = 1024;

/// The advisory lock that serialises migrations across replicas ("tidemill"
/// in ASCII).
const MIGRATION_LOCK: i64 = 0x7469_6465_6d69_6c6c;

/// A connection to PostgreSQL, served by a thread of its own.
pub struct Client {
    requests: UnboundedSender<Request>,
    /// Cleared when the connection ends.
    alive: Arc<AtomicBool>,
}

enum Op {
    Execute,
    Query,
    Batch,
}

/// A statement for the driver thread, and where to answer.
struct Request {
    op: Op,
    sql: String,
    params: Vec<Value>,
    answer: mpsc::SyncSender<Result<Outcome>>,
}

/// What a statement did: the rows it changed, or the rows it returned.
#[derive(Default)]
struct Outcome {
    count: u64,
    rows: Vec<Vec<Value>>,
}

fn error(code: Option<&str>, message: impl Into<String>) -> Error {
    Error::Postgres {
        code: code.map(str::to_owned),
        message: message.into(),
    }
}

fn stopped() -> Error {
    error(None, "the connection's thread has stopped")
}

impl Client {
    /// Connects to the database at `url` (the module documentation lists
    /// the options), waiting at most [`ANSWER_WAIT`].
    pub(super) fn connect(url: &str) -> Result<Client> {
        Self::connect_with(url, None)
    }

    /// [`Client::connect`], passing each notification the connection
    /// receives (after a `LISTEN`) to `on_notice`.
    pub(super) fn connect_with(url: &str, on_notice: Option<OnNotice>) -> Result<Client> {
        let config = configure(url)?;
        let (requests, inbox) = unbounded_channel();
        let (ready, connected) = mpsc::sync_channel(1);
        let alive = Arc::new(AtomicBool::new(true));
        let watched = alive.clone();
        std::thread::Builder::new()
            .name("tidemill-pg".into())
            .spawn(move || drive(config, inbox, ready, on_notice, watched))
            .map_err(|e| error(None, format!("cannot start the connection's thread: {e}")))?;
        match connected.recv_timeout(ANSWER_WAIT) {
            Ok(outcome) => outcome.map(|()| Client { requests, alive }),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(error(
                None,
                format!("no connection within {} s", ANSWER_WAIT.as_secs()),
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(stopped()),
        }
    }

    /// Applies the `migrations` the database lacks, each in a transaction
    /// of its own that also records the new schema version, under an
    /// advisory lock so that replicas starting together apply each once.
    pub(super) fn migrate(&self, migrations: &[&str]) -> Result<()> {
        loop {
            let begin = format!(
                "BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK}); \
                 CREATE TABLE IF NOT EXISTS tidemill_schema (version BIGINT NOT NULL)"
            );
            match self
                .batch(&begin)
                .and_then(|()| self.migrate_one(migrations))
            {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) => {
                    // The error is what matters; a failed rollback leaves the
                    // server to abort the transaction with the connection.
                    let _ = self.batch("ROLLBACK");
                    return Err(e);
                }
            }
        }
    }

    /// In a migration's transaction: applies the next migration and commits
    /// (`true`), or commits and says there is none (`false`).
    fn migrate_one(&self, migrations: &[&str]) -> Result<bool> {
        let rows = self.query("SELECT COALESCE(MAX(version), 0) FROM tidemill_schema", &[])?;
        let Some(&[Value::Integer(version)]) = rows.first().map(Vec::as_slice) else {
            return Err(error(None, "tidemill_schema's version is not an integer"));
        };
        let known = migrations.len();
        let next = match usize::try_from(version) {
            Ok(v) if v == known => {
                self.batch("COMMIT")?;
                return Ok(false);
            }
            Ok(v) if v < known => v + 1,
            _ => {
                return Err(error(
                    None,
                    format!(
                        "database has schema version {version}, newer than the {known} this \
                         build knows; run a newer tidemill or restore a backup"
                    ),
                ));
            }
        };
        let failed = |e: Error| match e {
            Error::Postgres { code, message } => Error::Postgres {
                code,
                message: format!("schema migration {next}: {message}"),
            },
            e => e,
        };
        self.batch(migrations[next - 1]).map_err(failed)?;
        self.execute("DELETE FROM tidemill_schema", &[])
            .map_err(failed)?;
        let bump = "INSERT INTO tidemill_schema (version) VALUES (?1)";
        self.execute(bump, &[ValueRef::Integer(next as i64)])
            .map_err(failed)?;
        self.batch("COMMIT").map_err(failed)?;
        tracing::info!(version = next, "applied a PostgreSQL schema migration");
        Ok(true)
    }

    /// Runs a statement; the rows it changed.
    pub(super) fn execute(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<u64> {
        self.call(Op::Execute, sql, params).map(|o| o.count)
    }

    /// Runs a query; every row it returned.
    pub(super) fn query(&self, sql: &str, params: &[ValueRef<'_>]) -> Result<Vec<Vec<Value>>> {
        self.call(Op::Query, sql, params).map(|o| o.rows)
    }

    /// Whether the connection still stands.
    pub(super) fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Runs statements with no parameters, separated by `;`.
    pub(super) fn batch(&self, sql: &str) -> Result<()> {
        self.call(Op::Batch, sql, &[]).map(|_| ())
    }

    fn call(&self, op: Op, sql: &str, params: &[ValueRef<'_>]) -> Result<Outcome> {
        let (answer, answered) = mpsc::sync_channel(1);
        let request = Request {
            op,
            sql: sql.to_owned(),
            params: params.iter().map(|&v| v.to_owned()).collect(),
            answer,
        };
        self.requests.send(request).map_err(|_| stopped())?;
        match answered.recv_timeout(ANSWER_WAIT) {
            Ok(outcome) => outcome,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(error(
                None,
                format!("no answer within {} s", ANSWER_WAIT.as_secs()),
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(stopped()),
        }
    }
}

/// The URL parsed, with tidemill's defaults for what it leaves unset.
fn configure(url: &str) -> Result<Config> {
    let mut config: Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| error(None, describe(&e)))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("tidemill-cloud");
    }
    config.keepalives(true);
    // Later `-c` settings win, so the URL's own options come last.
    let timeout = format!("-c statement_timeout={SERVER_STATEMENT_TIMEOUT}");
    let options = match config.get_options() {
        Some(own) => format!("{timeout} {own}"),
        None => timeout,
    };
    config.options(options);
    Ok(config)
}

/// The rustls configuration: the system's roots and `PGSSLROOTCERT`'s.
fn tls_config() -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = std::env::var_os("PGSSLROOTCERT") {
        let certs = tidemill_runtime::tls::read_certs(path.as_ref())
            .map_err(|e| error(None, format!("PGSSLROOTCERT: {e}")))?;
        roots.add_parsable_certificates(certs);
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| error(None, format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Connects, and spawns the connection's task on the current runtime.
/// Called for each `NOTIFY` on a channel the connection listens on.
pub(super) type OnNotice = Arc<dyn Fn() + Send + Sync>;

/// Connects, and spawns the task that drives the connection on the current
/// runtime: it passes each notification to `on_notice`, and clears `alive`
/// when the connection ends.
async fn open(
    config: &Config,
    on_notice: Option<OnNotice>,
    alive: Arc<AtomicBool>,
) -> Result<tokio_postgres::Client> {
    async fn watch<S, T>(
        mut connection: tokio_postgres::Connection<S, T>,
        on_notice: Option<OnNotice>,
        alive: Arc<AtomicBool>,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => {
                    if let Some(on) = &on_notice {
                        on();
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!("the PostgreSQL connection ended: {}", describe(&e));
                    break;
                }
                None => break,
            }
        }
        alive.store(false, Ordering::Relaxed);
    }
    let client = if config.get_ssl_mode() == SslMode::Disable {
        let (client, connection) = config.connect(NoTls).await.map_err(from_driver)?;
        tokio::spawn(watch(connection, on_notice, alive));
        client
    } else {
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config()?);
        let (client, connection) = config.connect(tls).await.map_err(from_driver)?;
        tokio::spawn(watch(connection, on_notice, alive));
        client
    };
    Ok(client)
}

/// The driver thread: connects, says so on `ready`, then serves requests
/// until the [`Client`] is dropped.
fn drive(
    config: Config,
    mut inbox: UnboundedReceiver<Request>,
    ready: mpsc::SyncSender<Result<()>>,
    on_notice: Option<OnNotice>,
    alive: Arc<AtomicBool>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(error(
                None,
                format!("cannot start the connection's runtime: {e}"),
            )));
            return;
        }
    };
    runtime.block_on(async move {
        let opened = open(&config, on_notice, alive);
        let client = match tokio::time::timeout(STATEMENT_LIMIT, opened).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                let _ = ready.send(Err(e));
                return;
            }
            Err(_) => {
                let limit = STATEMENT_LIMIT.as_secs();
                let _ = ready.send(Err(error(None, format!("no connection within {limit} s"))));
                return;
            }
        };
        if ready.send(Ok(())).is_err() {
            return;
        }
        let mut driver = Driver {
            client: Some(client),
            statements: HashMap::new(),
        };
        while let Some(request) = inbox.recv().await {
            let outcome = driver.run(&request.op, &request.sql, &request.params).await;
            // The caller may have stopped waiting; then nobody needs this.
            let _ = request.answer.send(outcome);
        }
    });
}

/// The driver thread's connection and its prepared statements.
struct Driver {
    /// `None` once a statement ran past [`STATEMENT_LIMIT`].
    client: Option<tokio_postgres::Client>,
    statements: HashMap<String, Statement>,
}

impl Driver {
    async fn run(&mut self, op: &Op, sql: &str, params: &[Value]) -> Result<Outcome> {
        match tokio::time::timeout(STATEMENT_LIMIT, self.retrying(op, sql, params)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                self.client = None;
                self.statements.clear();
                Err(error(
                    None,
                    format!(
                        "a statement ran past {} s; the connection is closed",
                        STATEMENT_LIMIT.as_secs()
                    ),
                ))
            }
        }
    }

    /// Runs the request, and once more after clearing the statement cache if
    /// the server says a cached plan no longer fits (a migration changed a
    /// table). Inside a transaction the retry finds it aborted; then the
    /// first error is the one that says why.
    async fn retrying(&mut self, op: &Op, sql: &str, params: &[Value]) -> Result<Outcome> {
        match self.once(op, sql, params).await {
            Err(Error::Postgres {
                code: Some(code),
                message,
            }) if code == "0A000" => {
                self.statements.clear();
                match self.once(op, sql, params).await {
                    Err(Error::Postgres {
                        code: Some(again), ..
                    }) if again == "25P02" => Err(Error::Postgres {
                        code: Some(code),
                        message,
                    }),
                    outcome => outcome,
                }
            }
            outcome => outcome,
        }
    }

    async fn once(&mut self, op: &Op, sql: &str, params: &[Value]) -> Result<Outcome> {
        let Some(client) = &self.client else {
            return Err(error(
                None,
                "the connection was closed after a statement ran past its time",
            ));
        };
        if let Op::Batch = op {
            client.batch_execute(sql).await.map_err(from_driver)?;
            return Ok(Outcome::default());
        }
        let statement = match self.statements.get(sql) {
            Some(statement) => statement.clone(),
            None => {
                let statement = client.prepare(&translate(sql)).await.map_err(from_driver)?;
                if self.statements.len() >= CACHE_LIMIT {
                    self.statements.clear();
                }
                self.statements.insert(sql.to_owned(), statement.clone());
                statement
            }
        };
        let params: Vec<Param<'_>> = params
            .iter()
            .enumerate()
            .map(|(i, value)| Param { n: i + 1, value })
            .collect();
        let binds: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        if let Op::Execute = op {
            let count = client
                .execute(&statement, &binds)
                .await
                .map_err(from_driver)?;
            return Ok(Outcome {
                count,
                ..Outcome::default()
            });
        }
        let rows = client
            .query(&statement, &binds)
            .await
            .map_err(from_driver)?;
        let rows = rows.iter().map(wire::values).collect::<Result<_>>()?;
        Ok(Outcome {
            rows,
            ..Outcome::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::FromValue;

    fn client() -> Option<Client> {
        let url = crate::store::pg_cluster::database()?;
        Some(Client::connect(&url).expect("connect"))
    }

    fn code(e: &Error) -> Option<&str> {
        match e {
            Error::Postgres { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    #[test]
    fn a_client_is_send_and_sync() {
        fn shared<T: Send + Sync>() {}
        shared::<Client>();
    }

    #[test]
    fn migrating_twice_applies_each_migration_once_and_a_newer_schema_is_refused() {
        let Some(c) = client() else { return };
        let migrations = [
            "CREATE TABLE a (x BIGINT)",
            "ALTER TABLE a ADD COLUMN y TEXT",
        ];
        c.migrate(&migrations).unwrap();
        c.migrate(&migrations).unwrap();
        let version = c.query("SELECT version FROM tidemill_schema", &[]).unwrap();
        assert_eq!(version, vec![vec![Value::Integer(2)]]);
        let e = c.migrate(&migrations[..1]).unwrap_err().to_string();
        assert!(e.contains("schema version 2, newer than the 1"), "{e}");
        let e = c.migrate(&[migrations[0], migrations[1], "CREATE TABLE a (z BIGINT)"]);
        let e = e.unwrap_err();
        assert_eq!(code(&e), Some("42P07"));
        assert!(e.to_string().contains("schema migration 3"), "{e}");
        let version = c.query("SELECT version FROM tidemill_schema", &[]).unwrap();
        assert_eq!(version, vec![vec![Value::Integer(2)]]);
    }

    #[test]
    fn replicas_migrating_together_apply_each_migration_once() {
        let Some(url) = crate::store::pg_cluster::database() else {
            return;
        };
        let migrations = ["CREATE TABLE a (x BIGINT)", "CREATE TABLE b (x BIGINT)"];
        let start = std::sync::Arc::new(std::sync::Barrier::new(3));
        let replicas: Vec<_> = (0..3)
            .map(|_| {
                let (c, start) = (Client::connect(&url).unwrap(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    c.migrate(&migrations)
                })
            })
            .collect();
        for replica in replicas {
            replica.join().unwrap().unwrap();
        }
        let c = Client::connect(&url).unwrap();
        let version = c.query("SELECT version FROM tidemill_schema", &[]).unwrap();
        assert_eq!(version, vec![vec![Value::Integer(2)]]);
    }

    #[test]
    fn every_kind_of_value_round_trips() {
        let Some(c) = client() else { return };
        c.batch(
            "CREATE TABLE t (i BIGINT, f DOUBLE PRECISION, s TEXT, b BYTEA, j JSONB, n INTEGER);
             CREATE TABLE u (s TEXT)",
        )
        .unwrap();
        let doc = r#"{"a": "it's \"quoted\"", "b": [1, 2.5]}"#;
        let text = "it's \"quoted\" ? -- not a comment";
        let insert = "INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
        let row = [
            ValueRef::Integer(i64::MIN),
            ValueRef::Real(-0.125),
            ValueRef::Text(text),
            ValueRef::Blob(&[0, 255, 39, 0]),
            ValueRef::Text(doc),
            ValueRef::Integer(i64::from(i32::MAX)),
        ];
        assert_eq!(c.execute(insert, &row).unwrap(), 1);
        let nulls = [ValueRef::Null; 6];
        assert_eq!(c.execute(insert, &nulls).unwrap(), 1);
        let rows = c
            .query("SELECT * FROM t ORDER BY i NULLS LAST", &[])
            .unwrap();
        let owned: Vec<Value> = row.iter().map(|&v| v.to_owned()).collect();
        assert_eq!(rows, vec![owned, vec![Value::Null; 6]]);
        let big = c.query(
            "SELECT i FROM t WHERE i = ?1",
            &[ValueRef::Integer(i64::MIN)],
        );
        assert_eq!(big.unwrap(), vec![vec![Value::Integer(i64::MIN)]]);
        // SQLite's loose typing: an integer for a double, or as text.
        c.execute(
            "UPDATE t SET f = ?1, s = ?2",
            &[ValueRef::Integer(3), ValueRef::Integer(42)],
        )
        .unwrap();
        let rows = c.query("SELECT f, s FROM t LIMIT 1", &[]).unwrap();
        assert_eq!(rows, vec![vec![Value::Real(3.0), Value::Text("42".into())]]);
        let e = c
            .execute("UPDATE t SET n = ?1", &[ValueRef::Integer(1 << 40)])
            .unwrap_err();
        assert!(
            e.to_string().contains("?1") && e.to_string().contains("int4"),
            "{e}"
        );
        let e = c
            .execute("UPDATE t SET b = ?1", &[ValueRef::Text("x")])
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("parameter ?1: cannot bind text as bytea"),
            "{e}"
        );
        let e = c.query("SELECT now()", &[]).unwrap_err().to_string();
        assert!(
            e.contains("column 0 (now)") && e.contains("timestamptz"),
            "{e}"
        );
    }

    #[test]
    fn booleans_read_as_integers_and_sums_as_reals_that_integers_accept() {
        let Some(c) = client() else { return };
        c.batch("CREATE TABLE t (x BIGINT); INSERT INTO t VALUES (4000000000), (5)")
            .unwrap();
        let rows = c.query(
            "SELECT 1 < 2, x > ?1 FROM t ORDER BY x",
            &[ValueRef::Integer(10)],
        );
        let rows = rows.unwrap();
        assert_eq!(rows[0], vec![Value::Integer(1), Value::Integer(0)]);
        let rows = c.query("SELECT SUM(x), AVG(x) FROM t", &[]).unwrap();
        assert_eq!(
            rows,
            vec![vec![
                Value::Real(4_000_000_005.0),
                Value::Real(2_000_000_002.5)
            ]]
        );
        assert_eq!(i64::from_value(rows[0][0].as_ref()), Ok(4_000_000_005));
    }

    #[test]
    fn a_rolled_back_transaction_leaves_no_row() {
        let Some(c) = client() else { return };
        c.batch("CREATE TABLE t (x BIGINT)").unwrap();
        c.batch("BEGIN").unwrap();
        c.execute("INSERT INTO t VALUES (?)", &[ValueRef::Integer(1)])
            .unwrap();
        c.batch("ROLLBACK").unwrap();
        let rows = c.query("SELECT COUNT(*) FROM t", &[]).unwrap();
        assert_eq!(rows, vec![vec![Value::Integer(0)]]);
    }

    #[test]
    fn a_unique_violation_has_its_sqlstate() {
        let Some(c) = client() else { return };
        c.batch("CREATE TABLE t (x BIGINT PRIMARY KEY)").unwrap();
        c.execute("INSERT INTO t VALUES (?1)", &[ValueRef::Integer(1)])
            .unwrap();
        let e = c
            .execute("INSERT INTO t VALUES (?1)", &[ValueRef::Integer(1)])
            .unwrap_err();
        assert_eq!(code(&e), Some("23505"));
        assert!(
            e.to_string().contains("DETAIL: Key (x)=(1) already exists"),
            "{e}"
        );
    }

    #[test]
    fn a_cached_statement_survives_a_change_of_its_table() {
        let Some(c) = client() else { return };
        c.batch("CREATE TABLE t (x BIGINT); INSERT INTO t VALUES (1)")
            .unwrap();
        assert_eq!(
            c.query("SELECT * FROM t", &[]).unwrap(),
            vec![vec![Value::Integer(1)]]
        );
        c.batch("ALTER TABLE t ADD COLUMN y TEXT DEFAULT 'y'")
            .unwrap();
        let rows = c.query("SELECT * FROM t", &[]).unwrap();
        assert_eq!(rows, vec![vec![Value::Integer(1), Value::Text("y".into())]]);
    }

    #[tokio::test]
    async fn it_serves_callers_inside_a_tokio_runtime() {
        let Some(c) = client() else { return };
        let rows = c
            .query("SELECT ?1", &[ValueRef::Text("in a runtime")])
            .unwrap();
        assert_eq!(rows, vec![vec![Value::Text("in a runtime".into())]]);
    }

    #[test]
    fn the_session_names_tidemill_and_times_statements_out() {
        let Some(c) = client() else { return };
        let rows = c.query(
            "SELECT current_setting('statement_timeout'), current_setting('application_name')",
            &[],
        );
        let want = vec![
            Value::Text("25s".into()),
            Value::Text("tidemill-cloud".into()),
        ];
        assert_eq!(rows.unwrap(), vec![want]);
    }

    #[test]
    fn no_error_shows_the_password() {
        let secret = "pw-Sup3rS3cret";
        let mut urls = vec![
            format!("postgres://u:{secret}@127.0.0.1:1/db?connect_timeout=2"),
            format!("postgres://u:{secret}@127.0.0.1:notaport/db"),
            format!("postgres://u:{secret}@127.0.0.1/db?frobnicate=1"),
        ];
        if let Some(url) = crate::store::pg_cluster::database() {
            let (_, rest) = url.rsplit_once('@').unwrap();
            urls.push(format!("postgres://nobody:{secret}@{rest}"));
        }
        for url in urls {
            let Err(e) = Client::connect(&url) else {
                panic!("{url} connected")
            };
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
