//! Secrets at rest: a daemon's key file and the sealed blobs it encrypts.
//!
//! Each daemon keeps one 256-bit key in `<data_dir>/secrets.key` (mode 0600,
//! made on first start, never logged), apart from its database, and seals
//! each secret blob with ChaCha20-Poly1305 under a fresh random nonce. The
//! associated data names the row the blob belongs to, so a blob copied into
//! another row does not open.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// The key file inside a data dir.
pub const KEY_FILE: &str = "secrets.key";

/// Bytes of a key.
const KEY_LEN: usize = 32;

/// The first byte of every sealed blob: the format, so a later one can differ.
const FORMAT: u8 = 1;

/// Why a key could not be loaded or a blob not opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The key file could not be read or written.
    #[error("secrets key {path}: {source}; check that it exists and this user may read it")]
    Io {
        /// The key file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The key file is not a key.
    #[error(
        "secrets key {path} holds {len} bytes, not {KEY_LEN}: restore it from the backup of this data dir"
    )]
    Malformed {
        /// The key file.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
    /// Others than its owner may read the key file.
    #[error(
        "secrets key {path} has mode {mode:o}, readable by other users: run `chmod 600 {path}`"
    )]
    Exposed {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file is gone but secrets sealed with it are still stored.
    #[error(
        "secrets key {path} is missing, but {what} hold secrets encrypted with it: restore the file from the backup of this data dir (mode 0600) and start again; {lost}"
    )]
    Missing {
        /// The key file.
        path: PathBuf,
        /// What holds sealed secrets, for people ("jobs 3, 7").
        what: String,
        /// What is lost without the key, and the way on.
        lost: String,
    },
    /// A sealed blob does not open with this key.
    #[error(
        "{what}: its secrets do not decrypt with {path} (the key was replaced, or the value was moved from another row): restore the key from the backup taken with this database; {lost}"
    )]
    Undecryptable {
        /// The key file.
        path: PathBuf,
        /// The row, for people ("job 3").
        what: String,
        /// What is lost without the right key, and the way on.
        lost: String,
    },
}

/// Names, for people, the rows that hold sealed secrets: "" for none,
/// "job 3", or "jobs 3, 7" (`noun` is the singular).
pub fn holders(noun: &str, ids: &[i64]) -> String {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    match ids {
        [] => String::new(),
        [_] => format!("{noun} {}", list[0]),
        _ => format!("{noun}s {}", list.join(", ")),
    }
}

/// A daemon's secrets key. Its `Debug` shows the file, never the key.
pub struct SecretKey {
    key: LessSafeKey,
    path: PathBuf,
    /// What is lost when a blob does not open, and the way on.
    lost: String,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SecretKey {
    /// Loads the key in `data_dir`, or makes one when there is none and
    /// nothing sealed is stored. `sealed` names what holds sealed secrets
    /// ("jobs 3, 7"), empty when nothing does: with a missing key, that is an
    /// error saying what is `lost` without it (as is a blob that does not
    /// open later), never a fresh key that would leave them unreadable.
    pub fn load_or_create(data_dir: &Path, sealed: &str, lost: &str) -> Result<Self, SecretError> {
        let path = data_dir.join(KEY_FILE);
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => Self::read(file, path, lost),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && sealed.is_empty() => {
                Self::create(path, lost)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SecretError::Missing {
                path,
                what: sealed.to_string(),
                lost: lost.to_string(),
            }),
            Err(source) => Err(SecretError::Io { path, source }),
        }
    }

    fn read(mut file: File, path: PathBuf, lost: &str) -> Result<Self, SecretError> {
        let io = |source| SecretError::Io {
            path: path.clone(),
            source,
        };
        let mode = file.metadata().map_err(io)?.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SecretError::Exposed { path, mode });
        }
        let mut bytes = Vec::with_capacity(KEY_LEN);
        file.read_to_end(&mut bytes).map_err(io)?;
        if bytes.len() != KEY_LEN {
            return Err(SecretError::Malformed {
                path,
                len: bytes.len(),
            });
        }
        Ok(Self::from_bytes(&bytes, path, lost))
    }

    /// Writes a fresh random key, owner-only and atomically (a crash leaves
    /// no half-written key).
    fn create(path: PathBuf, lost: &str) -> Result<Self, SecretError> {
        let mut bytes = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| SecretError::Io {
                path: path.clone(),
                source: std::io::Error::other("the system random source failed"),
            })?;
        crate::tls::write_private(&path, &bytes).map_err(|e| SecretError::Io {
            path: path.clone(),
            source: match e {
                crate::tls::TlsError::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            },
        })?;
        tracing::info!(key = %path.display(), "made a new secrets key; back it up with the data dir");
        Ok(Self::from_bytes(&bytes, path, lost))
    }

    fn from_bytes(bytes: &[u8], path: PathBuf, lost: &str) -> Self {
        let key = UnboundKey::new(&CHACHA20_POLY1305, bytes).expect("a 32-byte ChaCha20 key");
        SecretKey {
            key: LessSafeKey::new(key),
            path,
            lost: lost.to_string(),
        }
    }

    /// The key file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The error for a sealed value of `what` that opened but is not what
    /// was sealed there.
    pub fn refused(&self, what: &str) -> SecretError {
        SecretError::Undecryptable {
            path: self.path.clone(),
            what: what.to_string(),
            lost: self.lost.clone(),
        }
    }

    /// Encrypts `plain` for the row `row` names: format byte, nonce, then
    /// the ciphertext and its tag.
    pub fn seal(&self, plain: &[u8], row: &str) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system random source works");
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(row.as_bytes()),
                &mut body,
            )
            .expect("sealing fits in memory");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + body.len());
        out.push(FORMAT);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        out
    }

    /// Decrypts a blob [`SecretKey::seal`] made for the same `row`; `what`
    /// names that row for people in the error, which says what is lost.
    pub fn open(&self, sealed: &[u8], row: &str, what: &str) -> Result<Vec<u8>, SecretError> {
        let refused = || self.refused(what);
        let [FORMAT, rest @ ..] = sealed else {
            return Err(refused());
        };
        if rest.len() < NONCE_LEN {
            return Err(refused());
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| refused())?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(row.as_bytes()), &mut body)
            .map_err(|_| refused())?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_sealed_blob_opens_only_for_its_row_and_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = SecretKey::load_or_create(dir.path(), "", "").unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let blob = key.seal(b"hunter2", "job 1");
        assert!(!blob.windows(7).any(|w| w == b"hunter2"));
        assert_ne!(
            blob,
            key.seal(b"hunter2", "job 1"),
            "a fresh nonce each time"
        );
        assert_eq!(key.open(&blob, "job 1", "job 1").unwrap(), b"hunter2");
        let moved = key.open(&blob, "job 2", "job 2").unwrap_err();
        assert!(
            matches!(moved, SecretError::Undecryptable { .. }),
            "{moved}"
        );

        let again = SecretKey::load_or_create(dir.path(), "job 1", "").unwrap();
        assert_eq!(again.open(&blob, "job 1", "job 1").unwrap(), b"hunter2");
        let other = tempfile::tempdir().unwrap();
        let other = SecretKey::load_or_create(other.path(), "", "").unwrap();
        let err = other.open(&blob, "job 1", "job 1").unwrap_err().to_string();
        assert!(err.contains(KEY_FILE) && err.contains("restore"), "{err}");
    }

    #[test]
    fn a_missing_exposed_or_short_key_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        let err = SecretKey::load_or_create(dir.path(), "jobs 3, 7", "they are lost").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&path.display().to_string()) && text.contains("jobs 3, 7"),
            "{text}"
        );
        assert!(!path.exists(), "no fresh key over sealed secrets");

        SecretKey::load_or_create(dir.path(), "", "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = SecretKey::load_or_create(dir.path(), "", "").unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, b"short").unwrap();
        let err = SecretKey::load_or_create(dir.path(), "", "").unwrap_err();
        assert!(
            matches!(err, SecretError::Malformed { len: 5, .. }),
            "{err}"
        );
    }
}
