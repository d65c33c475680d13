//! One SQL interface over the store's two back ends: SQLite, embedded (the
//! default: one box, the demo, the tests), and PostgreSQL, shared by
//! coordinator replicas. The store writes its SQL once, in the subset both
//! speak (`?1` parameters, `ON CONFLICT`, `RETURNING`, and the helper
//! functions the PostgreSQL schema defines), and reads and binds the same
//! [`Value`]s on both.

mod pg;
mod sqlite;
mod value;

pub use value::{FromValue, Params, ToValue, Value, ValueRef};

/// Builds a statement's parameters from expressions of mixed types, as
/// `rusqlite::params!` does.
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::store::db::ToValue]
    };
    ($($p:expr),+ $(,)?) => {
        &[$(&$p as &dyn $crate::store::db::ToValue),+] as &[&dyn $crate::store::db::ToValue]
    };
}
pub(crate) use params;

/// Which back end a connection speaks, for the few statements (pragmas,
/// table sizes) that only one of them has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite, embedded.
    Sqlite,
    /// PostgreSQL, over the network.
    Postgres,
}

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite's error.
    #[error(transparent)]
    Sqlite(rusqlite::Error),
    /// PostgreSQL's error: its SQLSTATE code when the server sent one, and
    /// its message (never the connection URL, which holds the password).
    #[error("PostgreSQL: {message}")]
    Postgres {
        /// The SQLSTATE, such as `40001`.
        code: Option<String>,
        /// What went wrong.
        message: String,
    },
    /// A query that must return a row returned none.
    #[error("the query returned no rows")]
    NoRows,
    /// A column held a value of another type than the store reads.
    #[error("column {column}: wanted {wanted}, found {found}")]
    Column {
        /// The column's index.
        column: usize,
        /// What the store reads it as.
        wanted: &'static str,
        /// What it held.
        found: &'static str,
    },
    /// A column's text did not parse (a stored JSON document).
    #[error("column {column}: {source}")]
    Decode {
        /// The column's index.
        column: usize,
        /// The parser's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::QueryReturnedNoRows => Error::NoRows,
            e => Error::Sqlite(e),
        }
    }
}

impl Error {
    /// A column whose text did not parse.
    pub fn decode(
        column: usize,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Decode {
            column,
            source: source.into(),
        }
    }
}

/// A statement's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `query_row`'s "no row" as `None`, as `rusqlite::OptionalExtension` does.
pub trait OptionalExtension<T> {
    /// `Ok(None)` for a query that returned no row.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One row of a result.
pub struct Row<'a> {
    inner: RowInner<'a>,
}

enum RowInner<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a [Value]),
}

impl Row<'_> {
    /// Column `i`, read as `T`.
    pub fn get<I: ColumnIndex, T: FromValue>(&self, i: I) -> Result<T> {
        let i = i.index();
        let v = match &self.inner {
            RowInner::Sqlite(r) => sqlite::value(r.get_ref(i)?),
            RowInner::Postgres(v) => v.get(i).map_or(ValueRef::Null, Value::as_ref),
        };
        T::from_value(v).map_err(|wanted| Error::Column {
            column: i,
            wanted,
            found: v.kind(),
        })
    }
}

/// What names a column: its index from 0.
pub trait ColumnIndex {
    /// The index.
    fn index(self) -> usize;
}

impl ColumnIndex for usize {
    fn index(self) -> usize {
        self
    }
}

/// A borrowed connection, inside a transaction or not: where statements run.
#[derive(Clone, Copy)]
pub enum Handle<'a> {
    /// SQLite.
    Sqlite(&'a rusqlite::Connection),
    /// PostgreSQL.
    Postgres(&'a pg::Client),
}

/// Rows mapped by a `query_map` closure, each already `Ok` (the first error
/// is returned by `query_map` itself).
pub type Rows<T> = std::iter::Map<std::vec::IntoIter<T>, fn(T) -> Result<T>>;

impl Handle<'_> {
    fn dialect(self) -> Dialect {
        match self {
            Handle::Sqlite(_) => Dialect::Sqlite,
            Handle::Postgres(_) => Dialect::Postgres,
        }
    }

    fn execute(self, sql: &str, params: &[ValueRef<'_>]) -> Result<usize> {
        match self {
            Handle::Sqlite(c) => sqlite::execute(c, sql, params),
            Handle::Postgres(c) => c.execute(sql, params).map(|n| n as usize),
        }
    }

    fn query_each(
        self,
        sql: &str,
        params: &[ValueRef<'_>],
        f: &mut dyn FnMut(&Row<'_>) -> Result<()>,
    ) -> Result<()> {
        match self {
            Handle::Sqlite(c) => sqlite::query_each(c, sql, params, &mut |r| {
                f(&Row {
                    inner: RowInner::Sqlite(r),
                })
            }),
            Handle::Postgres(c) => {
                for values in c.query(sql, params)? {
                    f(&Row {
                        inner: RowInner::Postgres(&values),
                    })?;
                }
                Ok(())
            }
        }
    }

    fn execute_batch(self, sql: &str) -> Result<()> {
        match self {
            Handle::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Handle::Postgres(c) => c.batch(sql),
        }
    }
}

/// The statements a connection or a transaction runs. Each takes SQL with
/// `?N` parameters, which PostgreSQL's driver rewrites to `$N`.
pub trait Query {
    /// Where statements run.
    fn handle(&self) -> Handle<'_>;

    /// Which back end this is.
    fn dialect(&self) -> Dialect {
        self.handle().dialect()
    }

    /// Runs a statement; the rows it changed.
    fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.handle().execute(sql, &params.values())
    }

    /// The first row, mapped by `f`; [`Error::NoRows`] when there is none.
    fn query_row<T, P: Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut f = Some(f);
        let mut out = None;
        self.handle().query_each(sql, &params.values(), &mut |r| {
            if let Some(f) = f.take() {
                out = Some(f(r)?);
            }
            Ok(())
        })?;
        out.ok_or(Error::NoRows)
    }

    /// A statement to run with several sets of parameters (SQLite caches
    /// its compiled form; PostgreSQL's driver its prepared one).
    fn prepare(&self, sql: &str) -> Result<Stmt<'_>> {
        Ok(Stmt {
            handle: self.handle(),
            sql: sql.to_owned(),
        })
    }

    /// [`Query::prepare`]; both cache.
    fn prepare_cached(&self, sql: &str) -> Result<Stmt<'_>> {
        self.prepare(sql)
    }

    /// Runs statements with no parameters, separated by `;`.
    fn execute_batch(&self, sql: &str) -> Result<()> {
        self.handle().execute_batch(sql)
    }
}

/// A statement ([`Query::prepare`]).
pub struct Stmt<'a> {
    handle: Handle<'a>,
    sql: String,
}

impl Stmt<'_> {
    /// Runs it; the rows it changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        self.handle.execute(&self.sql, &params.values())
    }

    /// Every row, mapped by `f`.
    pub fn query_map<T, P: Params>(
        &mut self,
        params: P,
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Rows<T>> {
        let mut out = Vec::new();
        self.handle
            .query_each(&self.sql, &params.values(), &mut |r| {
                out.push(f(r)?);
                Ok(())
            })?;
        Ok(out.into_iter().map(Ok as fn(T) -> Result<T>))
    }

    /// The first row, mapped by `f`; [`Error::NoRows`] when there is none.
    pub fn query_row<T, P: Params>(
        &mut self,
        params: P,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        let handle = self.handle;
        Query::query_row(&handle, &self.sql, params, f)
    }
}

impl Query for Handle<'_> {
    fn handle(&self) -> Handle<'_> {
        *self
    }
}

/// A PostgreSQL session that listens on a channel: each `NOTIFY` on it
/// calls the function it was started with, on the session's own thread.
pub struct Listener {
    client: pg::Client,
}

impl Listener {
    /// Connects to `url` and listens on `channel` (an SQL identifier).
    pub fn start(
        url: &str,
        channel: &str,
        on_notice: impl Fn() + Send + Sync + 'static,
    ) -> Result<Self> {
        let client = pg::Client::connect_with(url, Some(std::sync::Arc::new(on_notice)))?;
        client.batch(&format!("LISTEN {channel}"))?;
        Ok(Listener { client })
    }

    /// Whether the session still stands (else nothing more is heard).
    pub fn alive(&self) -> bool {
        self.client.alive()
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener(alive: {})", self.alive())
    }
}

/// A connection to the store's database.
pub struct Connection {
    backend: Backend,
}

enum Backend {
    Sqlite(rusqlite::Connection),
    /// The client, and the URL to connect again with.
    Postgres(pg::Client, String),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection({:?})", self.dialect())
    }
}

impl Connection {
    /// An open SQLite connection.
    pub fn sqlite(conn: rusqlite::Connection) -> Self {
        Connection {
            backend: Backend::Sqlite(conn),
        }
    }

    /// Connects to PostgreSQL at `url` and applies the `migrations` it lacks.
    pub fn postgres(url: &str, migrations: &[&str]) -> Result<Self> {
        let conn = Self::postgres_as_is(url)?;
        if let Backend::Postgres(client, _) = &conn.backend {
            client.migrate(migrations)?;
        }
        Ok(conn)
    }

    /// Connects to PostgreSQL at `url` and changes nothing (`doctor`).
    pub fn postgres_as_is(url: &str) -> Result<Self> {
        Ok(Connection {
            backend: Backend::Postgres(pg::Client::connect(url)?, url.to_string()),
        })
    }

    /// The SQLite connection, for what only SQLite has (pragmas).
    pub fn as_sqlite_ref(&self) -> Option<&rusqlite::Connection> {
        match &self.backend {
            Backend::Sqlite(c) => Some(c),
            Backend::Postgres(..) => None,
        }
    }

    /// [`Connection::as_sqlite_ref`], to write.
    pub fn as_sqlite(&mut self) -> Option<&mut rusqlite::Connection> {
        match &mut self.backend {
            Backend::Sqlite(c) => Some(c),
            Backend::Postgres(..) => None,
        }
    }

    /// Begins a transaction, committed by [`Transaction::commit`] and rolled
    /// back when dropped without. On PostgreSQL a connection that no longer
    /// takes a `BEGIN` (the server restarted, failed over, or ended the
    /// session) is replaced by a new one first: between transactions, so
    /// that no transaction's statements are split across two sessions.
    pub fn transaction(&mut self) -> Result<Transaction<'_>> {
        let backend = match &mut self.backend {
            Backend::Sqlite(c) => TxBackend::Sqlite(c.transaction()?),
            Backend::Postgres(c, url) => {
                if let Err(lost) = c.batch("BEGIN") {
                    tracing::warn!(error = %lost, "PostgreSQL refused a BEGIN; connecting again");
                    *c = pg::Client::connect(url)?;
                    c.batch("BEGIN")?;
                    tracing::info!("connected to PostgreSQL again");
                }
                TxBackend::Postgres(PgTx {
                    client: c,
                    open: true,
                })
            }
        };
        Ok(Transaction { backend })
    }
}

impl Query for Connection {
    fn handle(&self) -> Handle<'_> {
        match &self.backend {
            Backend::Sqlite(c) => Handle::Sqlite(c),
            Backend::Postgres(c, _) => Handle::Postgres(c),
        }
    }
}

/// A transaction ([`Connection::transaction`]).
pub struct Transaction<'a> {
    backend: TxBackend<'a>,
}

enum TxBackend<'a> {
    Sqlite(rusqlite::Transaction<'a>),
    Postgres(PgTx<'a>),
}

/// An open PostgreSQL transaction, rolled back when dropped uncommitted.
struct PgTx<'a> {
    client: &'a pg::Client,
    open: bool,
}

impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        if self.open {
            // A failed rollback leaves the server to abort the transaction
            // when the next statement fails; nothing is committed either way.
            let _ = self.client.batch("ROLLBACK");
        }
    }
}

impl Transaction<'_> {
    /// Commits it.
    pub fn commit(self) -> Result<()> {
        match self.backend {
            TxBackend::Sqlite(tx) => Ok(tx.commit()?),
            TxBackend::Postgres(mut tx) => {
                tx.open = false;
                tx.client.batch("COMMIT")
            }
        }
    }
}

impl Query for Transaction<'_> {
    fn handle(&self) -> Handle<'_> {
        match &self.backend {
            TxBackend::Sqlite(tx) => Handle::Sqlite(tx),
            TxBackend::Postgres(tx) => Handle::Postgres(tx.client),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session the server ended (a restart, a failover, an operator's
    /// `pg_terminate_backend`) is replaced at the next transaction.
    #[test]
    fn a_lost_postgres_session_is_replaced_at_the_next_transaction() {
        let Some(url) = crate::store::pg_cluster::database() else {
            return;
        };
        let mut conn = Connection::postgres(&url, &[]).unwrap();
        let pid: i64 = conn
            .query_row("SELECT pg_backend_pid()", [], |r| r.get(0))
            .unwrap();
        let other = Connection::postgres(&url, &[]).unwrap();
        let ended: bool = other
            .query_row(
                "SELECT pg_terminate_backend(CAST(?1 AS INTEGER))",
                [pid],
                |r| r.get(0),
            )
            .unwrap();
        assert!(ended);
        assert!(
            conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))
                .is_err(),
            "the session is gone"
        );
        let tx = conn.transaction().unwrap();
        let again: i64 = tx
            .query_row("SELECT pg_backend_pid()", [], |r| r.get(0))
            .unwrap();
        tx.commit().unwrap();
        assert_ne!(again, pid, "a new session");
    }
}
