//! The values that cross the store's SQL interface, the same on SQLite and
//! PostgreSQL: what a parameter binds and what a column reads, with the
//! loose typing SQLite has (an integer column reads as `bool`, `f64` or a
//! narrower integer), so that one store serves both back ends.

/// An owned SQL value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A 64-bit integer (booleans are 0 and 1).
    Integer(i64),
    /// A double.
    Real(f64),
    /// UTF-8 text (JSON documents included).
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// A borrowed SQL value: what a parameter binds, and a column's view.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// SQL NULL.
    Null,
    /// A 64-bit integer.
    Integer(i64),
    /// A double.
    Real(f64),
    /// UTF-8 text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

impl Value {
    /// This value, borrowed.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl ValueRef<'_> {
    /// An owned copy.
    pub fn to_owned(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(s) => Value::Text(s.to_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }

    /// The value's kind, for errors.
    pub fn kind(self) -> &'static str {
        match self {
            ValueRef::Null => "NULL",
            ValueRef::Integer(_) => "an integer",
            ValueRef::Real(_) => "a real",
            ValueRef::Text(_) => "text",
            ValueRef::Blob(_) => "a blob",
        }
    }
}

/// A Rust value that binds as a SQL parameter.
pub trait ToValue {
    /// The value to bind.
    fn to_value(&self) -> ValueRef<'_>;
}

macro_rules! int_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> ValueRef<'_> {
                ValueRef::Integer(*self as i64)
            }
        }
    )*};
}
int_to_value!(i64, i32, u32, u16, u8, u64, usize);

impl ToValue for bool {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Integer(i64::from(*self))
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Real(*self)
    }
}

impl ToValue for f32 {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Real(f64::from(*self))
    }
}

impl ToValue for str {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Text(self)
    }
}

impl ToValue for String {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Text(self)
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Blob(self)
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> ValueRef<'_> {
        ValueRef::Blob(self)
    }
}

impl ToValue for Value {
    fn to_value(&self) -> ValueRef<'_> {
        self.as_ref()
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> ValueRef<'_> {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> ValueRef<'_> {
        self.as_ref().map_or(ValueRef::Null, ToValue::to_value)
    }
}

/// A Rust value that a column reads as. `Err` names what was wanted.
pub trait FromValue: Sized {
    /// Reads `v`; `Err(what was wanted)` when it does not fit.
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str>;
}

impl FromValue for i64 {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        match v {
            ValueRef::Integer(i) => Ok(i),
            // PostgreSQL's SUM and AVG give NUMERIC, read as a double.
            ValueRef::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            _ => Err("an integer"),
        }
    }
}

macro_rules! narrow_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
                <$t>::try_from(i64::from_value(v)?).map_err(|_| concat!("an integer that fits ", stringify!($t)))
            }
        }
    )*};
}
narrow_from_value!(i32, u32, u16, u8, u64, usize);

impl FromValue for bool {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        i64::from_value(v).map(|i| i != 0).map_err(|_| "a boolean")
    }
}

impl FromValue for f64 {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        match v {
            ValueRef::Real(f) => Ok(f),
            ValueRef::Integer(i) => Ok(i as f64),
            _ => Err("a number"),
        }
    }
}

impl FromValue for f32 {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        f64::from_value(v).map(|f| f as f32)
    }
}

impl FromValue for String {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        match v {
            ValueRef::Text(s) => Ok(s.to_owned()),
            _ => Err("text"),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        match v {
            ValueRef::Blob(b) => Ok(b.to_vec()),
            ValueRef::Text(s) => Ok(s.as_bytes().to_vec()),
            _ => Err("a blob"),
        }
    }
}

impl FromValue for Value {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        Ok(v.to_owned())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: ValueRef<'_>) -> Result<Self, &'static str> {
        match v {
            ValueRef::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// What a statement binds: `params![...]`, an array of one type, or `[]`.
pub trait Params {
    /// The values, in order (`?1` is the first).
    fn values(&self) -> Vec<ValueRef<'_>>;
}

impl Params for [&dyn ToValue] {
    fn values(&self) -> Vec<ValueRef<'_>> {
        self.iter().map(|p| p.to_value()).collect()
    }
}

impl Params for &[&dyn ToValue] {
    fn values(&self) -> Vec<ValueRef<'_>> {
        self.iter().map(|p| p.to_value()).collect()
    }
}

impl Params for [&dyn ToValue; 0] {
    fn values(&self) -> Vec<ValueRef<'_>> {
        Vec::new()
    }
}

macro_rules! array_params {
    ($($n:literal),*) => {$(
        impl<T: ToValue> Params for [T; $n] {
            fn values(&self) -> Vec<ValueRef<'_>> {
                self.iter().map(ToValue::to_value).collect()
            }
        }
    )*};
}
array_params!(1, 2, 3, 4, 5, 6, 7, 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_read_as_booleans_doubles_and_narrower_integers() {
        assert_eq!(bool::from_value(ValueRef::Integer(1)), Ok(true));
        assert_eq!(f64::from_value(ValueRef::Integer(3)), Ok(3.0));
        assert_eq!(u32::from_value(ValueRef::Integer(7)), Ok(7));
        assert!(u32::from_value(ValueRef::Integer(-1)).is_err());
        assert_eq!(i64::from_value(ValueRef::Real(12.0)), Ok(12));
        assert!(i64::from_value(ValueRef::Real(12.5)).is_err());
        assert_eq!(Option::<i64>::from_value(ValueRef::Null), Ok(None));
        assert!(String::from_value(ValueRef::Integer(1)).is_err());
    }

    #[test]
    fn options_bind_as_null_and_booleans_as_integers() {
        assert_eq!(None::<i64>.to_value(), ValueRef::Null);
        assert_eq!(true.to_value(), ValueRef::Integer(1));
        assert_eq!("a".to_value(), ValueRef::Text("a"));
    }
}
