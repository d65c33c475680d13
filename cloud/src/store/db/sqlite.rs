//! The SQLite side of [`super::Handle`]: binding [`ValueRef`]s and reading
//! columns through rusqlite, with every statement's compiled form cached.

use rusqlite::types::{ToSqlOutput, ValueRef as SqliteRef};

use super::{Result, ValueRef};

/// A parameter, bound without a copy.
struct Bind<'a>(ValueRef<'a>);

impl rusqlite::ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self.0 {
            ValueRef::Null => SqliteRef::Null,
            ValueRef::Integer(i) => SqliteRef::Integer(i),
            ValueRef::Real(f) => SqliteRef::Real(f),
            ValueRef::Text(s) => SqliteRef::Text(s.as_bytes()),
            ValueRef::Blob(b) => SqliteRef::Blob(b),
        }))
    }
}

fn binds<'a>(params: &'a [ValueRef<'a>]) -> impl rusqlite::Params + 'a {
    rusqlite::params_from_iter(params.iter().map(|v| Bind(*v)))
}

/// A column's value as the store reads it (text that is not UTF-8 reads as
/// a blob, so that it is refused where text is wanted).
pub(super) fn value(v: SqliteRef<'_>) -> ValueRef<'_> {
    match v {
        SqliteRef::Null => ValueRef::Null,
        SqliteRef::Integer(i) => ValueRef::Integer(i),
        SqliteRef::Real(f) => ValueRef::Real(f),
        SqliteRef::Text(t) => std::str::from_utf8(t).map_or(ValueRef::Blob(t), ValueRef::Text),
        SqliteRef::Blob(b) => ValueRef::Blob(b),
    }
}

pub(super) fn execute(
    c: &rusqlite::Connection,
    sql: &str,
    params: &[ValueRef<'_>],
) -> Result<usize> {
    Ok(c.prepare_cached(sql)?.execute(binds(params))?)
}

pub(super) fn query_each(
    c: &rusqlite::Connection,
    sql: &str,
    params: &[ValueRef<'_>],
    f: &mut dyn FnMut(&rusqlite::Row<'_>) -> Result<()>,
) -> Result<()> {
    let mut stmt = c.prepare_cached(sql)?;
    let mut rows = stmt.query(binds(params))?;
    while let Some(r) = rows.next()? {
        f(r)?;
    }
    Ok(())
}
