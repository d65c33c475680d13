//! What crosses the wire between the store and PostgreSQL, in the store's
//! terms: its SQL text, rewritten from SQLite's parameters to PostgreSQL's;
//! its [`Value`]s, with the loose typing the store has on SQLite (a
//! parameter binds to whatever type the server inferred for it where the
//! value fits, an integer to a `DOUBLE PRECISION` or `BOOLEAN`, text to
//! `JSONB`; a column of any numeric, boolean, text or byte type reads back
//! as one of the five kinds); and the driver's errors.

use std::error::Error as StdError;
use std::fmt;
use std::iter::Peekable;
use std::str::Chars;

use bytes::BytesMut;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use super::{Error, Result, Value, error};

type BoxError = Box<dyn StdError + Sync + Send>;

/// A parameter that does not fit the type the server inferred for it.
#[derive(Debug)]
struct BindError(String);

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for BindError {}

/// Parameter `?n` of a statement, converted to the parameter's type when
/// it is encoded.
#[derive(Debug)]
pub(super) struct Param<'a> {
    /// Its number, from 1.
    pub(super) n: usize,
    /// Its value.
    pub(super) value: &'a Value,
}

impl Param<'_> {
    fn refuse(&self, ty: &Type, why: &str) -> BoxError {
        let kind = self.value.as_ref().kind();
        Box::new(BindError(format!(
            "parameter ?{}: cannot bind {kind} as {ty}{why}",
            self.n
        )))
    }

    fn int<T>(&self, i: i64, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError>
    where
        T: TryFrom<i64> + ToSql,
    {
        match T::try_from(i) {
            Ok(v) => v.to_sql(ty, out),
            Err(_) => Err(self.refuse(ty, &format!(" ({i} is out of its range)"))),
        }
    }
}

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match (self.value, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (&Value::Integer(i), &Type::INT8) => i.to_sql(ty, out),
            (&Value::Integer(i), &Type::INT4) => self.int::<i32>(i, ty, out),
            (&Value::Integer(i), &Type::INT2) => self.int::<i16>(i, ty, out),
            (&Value::Integer(i), &Type::FLOAT8) => (i as f64).to_sql(ty, out),
            (&Value::Integer(i), &Type::FLOAT4) => (i as f32).to_sql(ty, out),
            (&Value::Integer(i @ (0 | 1)), &Type::BOOL) => (i == 1).to_sql(ty, out),
            (&Value::Integer(i), &Type::TEXT | &Type::VARCHAR) => {
                out.extend_from_slice(i.to_string().as_bytes());
                Ok(IsNull::No)
            }
            (&Value::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
            (&Value::Real(f), &Type::FLOAT4) => (f as f32).to_sql(ty, out),
            // Exactly the doubles in i64's range: -2^63 is one, 2^63 is not.
            (&Value::Real(f), &Type::INT8)
                if f.fract() == 0.0 && (i64::MIN as f64..-(i64::MIN as f64)).contains(&f) =>
            {
                (f as i64).to_sql(ty, out)
            }
            (
                Value::Text(s),
                &Type::TEXT
                | &Type::VARCHAR
                | &Type::BPCHAR
                | &Type::NAME
                | &Type::UNKNOWN
                | &Type::JSON,
            ) => {
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            (Value::Text(s), &Type::JSONB) => {
                out.extend_from_slice(&[1]);
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            (Value::Blob(b), &Type::BYTEA) => {
                out.extend_from_slice(b);
                Ok(IsNull::No)
            }
            _ => Err(self.refuse(ty, "")),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A column's value, read from any type the store reads.
struct Cell(Value);

impl<'a> FromSql<'a> for Cell {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(Cell(match *ty {
            Type::INT2 => Value::Integer(i16::from_sql(ty, raw)?.into()),
            Type::INT4 => Value::Integer(i32::from_sql(ty, raw)?.into()),
            Type::INT8 => Value::Integer(i64::from_sql(ty, raw)?),
            Type::OID => Value::Integer(u32::from_sql(ty, raw)?.into()),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::NUMERIC => Value::Real(numeric(raw)?),
            Type::BOOL => Value::Integer(bool::from_sql(ty, raw)?.into()),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
                Value::Text(std::str::from_utf8(raw)?.to_owned())
            }
            Type::JSONB => match raw.split_first() {
                Some((1, doc)) => Value::Text(std::str::from_utf8(doc)?.to_owned()),
                _ => return Err("a JSONB value of an unknown format version".into()),
            },
            Type::BYTEA => Value::Blob(raw.to_vec()),
            _ => return Err(format!("type {ty}, which the store does not read").into()),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(Cell(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A row's values; an error names the column that the store cannot read.
pub(super) fn values(row: &tokio_postgres::Row) -> Result<Vec<Value>> {
    (0..row.len())
        .map(|i| {
            row.try_get::<_, Cell>(i).map(|c| c.0).map_err(|e| {
                let why = e
                    .source()
                    .map_or_else(|| e.to_string(), ToString::to_string);
                let name = row.columns()[i].name();
                error(None, format!("column {i} ({name}): {why}"))
            })
        })
        .collect()
}

/// A NUMERIC in PostgreSQL's binary format, as the nearest double: four
/// 16-bit words (the count of base-10000 digits, the weight of the first
/// digit, the sign, and the display scale, which does not change the value),
/// then the digits. The digits are written out as decimal text with an
/// exponent and parsed, so that the result is correctly rounded.
fn numeric(raw: &[u8]) -> Result<f64, BoxError> {
    let word = |i: usize| {
        raw.get(2 * i..2 * i + 2)
            .map(|w| u16::from_be_bytes([w[0], w[1]]))
            .ok_or("a truncated NUMERIC")
    };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(1)? as i16);
    let mut text = match word(2)? {
        0x0000 => String::new(),
        0x4000 => String::from("-"),
        0xC000 => return Err("a NUMERIC that is NaN".into()),
        0xD000 => return Ok(f64::INFINITY),
        0xF000 => return Ok(f64::NEG_INFINITY),
        sign => return Err(format!("a NUMERIC with an unknown sign {sign:#06x}").into()),
    };
    text.push('0');
    for i in 0..ndigits {
        match word(4 + i)? {
            d @ 0..=9999 => text.push_str(&format!("{d:04}")),
            d => return Err(format!("a NUMERIC with a digit {d} over 9999").into()),
        }
    }
    let exponent = (weight + 1 - ndigits as i64) * 4;
    Ok(format!("{text}e{exponent}").parse()?)
}

/// A driver error as the store's: the server's SQLSTATE and message, with
/// its detail and hint.
pub(super) fn from_driver(e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(db) => {
            let mut message = db.message().to_owned();
            if let Some(detail) = db.detail() {
                message = format!("{message}; DETAIL: {detail}");
            }
            if let Some(hint) = db.hint() {
                message = format!("{message}; HINT: {hint}");
            }
            error(Some(db.code().code()), message)
        }
        None => error(None, describe(&e)),
    }
}

/// A driver error without a server's message: its chain of causes, and
/// what to do about a server certificate that is not trusted.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    let mut message = e.to_string();
    let mut untrusted = false;
    let mut source = e.source();
    while let Some(cause) = source {
        if let Some(bind) = cause.downcast_ref::<BindError>() {
            return bind.to_string();
        }
        let tls = cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        untrusted |= matches!(
            tls,
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        );
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    if untrusted {
        message.push_str(
            "; the server's certificate does not chain to a trusted root: add its CA to the \
             system's roots or name a PEM file of it in PGSSLROOTCERT",
        );
    }
    message
}

/// SQLite's parameters as PostgreSQL's: `?N` becomes `$N`, and a bare `?`
/// the number after the highest so far (SQLite's rule), outside quoted
/// strings, quoted identifiers and comments.
pub(super) fn translate(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut highest = 0u64;
    while let Some(c) = chars.next() {
        out.push(c);
        match c {
            // A doubled quote inside closes and reopens, which copies it.
            '\'' | '"' => copy_through(&mut chars, &mut out, c),
            '-' if chars.peek() == Some(&'-') => copy_through(&mut chars, &mut out, '\n'),
            '/' if chars.peek() == Some(&'*') => {
                out.extend(chars.next());
                let mut star = false;
                for d in chars.by_ref() {
                    out.push(d);
                    if star && d == '/' {
                        break;
                    }
                    star = d == '*';
                }
            }
            '?' => {
                out.pop();
                let mut digits = String::new();
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    digits.push(d);
                }
                let n = digits.parse::<u64>().unwrap_or(highest + 1);
                highest = highest.max(n);
                out.push_str(&format!("${n}"));
            }
            _ => {}
        }
    }
    out
}

/// Copies characters up to and including `end`, or to the end of the text.
fn copy_through(chars: &mut Peekable<Chars<'_>>, out: &mut String, end: char) {
    for d in chars.by_ref() {
        out.push(d);
        if d == end {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_and_bare_parameters_become_dollar_numbers() {
        assert_eq!(translate("SELECT ?1, ?2, ?1"), "SELECT $1, $2, $1");
        assert_eq!(translate("VALUES (?, ?, ?)"), "VALUES ($1, $2, $3)");
        assert_eq!(translate("?3 + ? - ?1"), "$3 + $4 - $1");
        assert_eq!(translate("x=?10"), "x=$10");
    }

    #[test]
    fn question_marks_in_strings_identifiers_and_comments_stay() {
        let sql = "SELECT '?1', 'it''s ?', \"a?\" -- what?\n, ?1 /* ?2 */, ?2";
        let want = "SELECT '?1', 'it''s ?', \"a?\" -- what?\n, $1 /* ?2 */, $2";
        assert_eq!(translate(sql), want);
        assert_eq!(translate("SELECT 8/2 - ?"), "SELECT 8/2 - $1");
        assert_eq!(translate("SELECT '?"), "SELECT '?");
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bytes from `numeric_send` on PostgreSQL 15.
    #[test]
    fn numerics_from_a_server_decode_to_the_nearest_double() {
        let cases = [
            // 0::numeric
            ("0000000000000000", 0.0),
            // SUM over the BIGINTs 1 and 2
            ("00010000000000000003", 3.0),
            // SUM over the BIGINTs 9223372036854775807 and 10: past i64
            (
                "0005000400000000039a0d2c0170156516b9",
                9_223_372_036_854_775_817.0,
            ),
            // AVG over the BIGINTs 1 and 2: 1.5000000000000000
            ("000200000000001000011388", 1.5),
            // AVG over the BIGINTs 1, 2 and 2: 1.6666666666666667
            (
                "000500000000001000011a0a1a0a1a0a1a0b",
                1.666_666_666_666_666_7,
            ),
            ("0003000140000003000109291a7c", -12_345.678),
            ("0001ffff000000040001", 0.0001),
            (
                "000500020000000604d2162e233400000064",
                123_456_789_012.000_001,
            ),
            ("00000000d0000020", f64::INFINITY),
        ];
        for (bytes, want) in cases {
            assert_eq!(numeric(&hex(bytes)).unwrap(), want, "{bytes}");
        }
    }

    #[test]
    fn a_nan_or_malformed_numeric_is_refused() {
        // 'NaN'::numeric
        assert!(numeric(&hex("00000000c0000000")).is_err());
        // One digit announced, none sent; a digit of 10000.
        assert!(numeric(&hex("0001000000000000")).is_err());
        assert!(numeric(&hex("00010000000000002710")).is_err());
        assert!(numeric(&hex("0001")).is_err());
    }

    #[test]
    fn parameters_convert_to_the_inferred_type_or_name_both_types() {
        let mut out = BytesMut::new();
        let seven = Value::Integer(7);
        let p = Param {
            n: 2,
            value: &seven,
        };
        p.to_sql(&Type::INT4, &mut out).unwrap();
        assert_eq!(&out[..], &7i32.to_be_bytes());
        let big = Value::Integer(1 << 40);
        let Err(e) = Param { n: 3, value: &big }.to_sql(&Type::INT4, &mut out) else {
            panic!("2^40 bound as an int4")
        };
        assert!(
            e.to_string().contains("?3") && e.to_string().contains("int4"),
            "{e}"
        );
        let Err(e) = p.to_sql(&Type::BYTEA, &mut out) else {
            panic!("an integer bound as bytea")
        };
        assert_eq!(
            e.to_string(),
            "parameter ?2: cannot bind an integer as bytea"
        );
        let half = Value::Real(0.5);
        assert!(
            Param { n: 1, value: &half }
                .to_sql(&Type::INT8, &mut out)
                .is_err()
        );
        let doc = Value::Text("{}".into());
        out.clear();
        Param { n: 1, value: &doc }
            .to_sql(&Type::JSONB, &mut out)
            .unwrap();
        assert_eq!(&out[..], b"\x01{}");
    }
}
