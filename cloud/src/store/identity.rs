//! Who may join and who has: join tokens (only a hash of each secret is
//! kept) and the node certificates issued against them, by fingerprint, so a
//! connection's certificate names its node and can be revoked.

use super::db;
use super::db::{OptionalExtension, Query, Transaction, params};
use serde::{Deserialize, Serialize};
use tidemill_runtime::identity::{secret_matches, sha256_hex};

use super::{Store, StoreError, event};

/// A join token as listings show it: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The token's public id.
    pub id: String,
    /// What the operator said it is for.
    pub description: String,
    /// When it was created, Unix ms.
    pub created_ms: i64,
    /// When it stops working, Unix ms (`None`: never).
    pub expires_ms: Option<i64>,
    /// Joins it still allows (`None`: any number).
    pub uses_left: Option<i64>,
    /// Joins made with it.
    pub used: i64,
    /// When it was revoked, Unix ms.
    pub revoked_ms: Option<i64>,
}

/// Why a join was refused; the message names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinRefusal {
    /// No such token, or the secret does not match.
    #[error(
        "the join token is unknown or its secret is wrong; create one with `tidemill-cloud token create`"
    )]
    BadToken,
    /// The token has expired.
    #[error("the join token {0} has expired; create a new one with `tidemill-cloud token create`")]
    Expired(String),
    /// The token was revoked.
    #[error("the join token {0} was revoked; create a new one with `tidemill-cloud token create`")]
    Revoked(String),
    /// The token has no uses left.
    #[error(
        "the join token {0} has no uses left; create a new one with `tidemill-cloud token create`"
    )]
    UsedUp(String),
    /// The node id already has a live certificate.
    #[error(
        "node {0} already has a certificate; if this is a new box replacing it, run `tidemill-cloud nodes remove {0}` first, or join with another node id"
    )]
    Taken(String),
}

/// An API token as listings show it: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiTokenRecord {
    /// The token's public id.
    pub id: String,
    /// `read`, `submit` or `admin`.
    pub scope: String,
    /// What the operator said it is for.
    pub description: String,
    /// When it was created, Unix ms.
    pub created_ms: i64,
    /// When it was revoked, Unix ms.
    pub revoked_ms: Option<i64>,
}

/// A certificate issued to a node, as the store keeps it.
#[derive(Debug, Clone, Copy)]
pub struct CertRecord<'a> {
    /// SHA-256 of the certificate, hex.
    pub fingerprint: &'a str,
    /// When it expires, Unix ms.
    pub not_after_ms: i64,
    /// SHA-256 of the CA that signed it, hex.
    pub issuer_sha256: &'a str,
}

/// Records a certificate issued to `node_id` (at a join with `token_id`, or
/// at a renewal).
fn insert_cert(
    tx: &Transaction<'_>,
    cert: CertRecord<'_>,
    node_id: &str,
    token_id: &str,
    now_ms: i64,
) -> db::Result<usize> {
    tx.execute(
        "INSERT INTO node_certs (fingerprint, node_id, token_id, issued_ms, not_after_ms, issuer_sha256)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![cert.fingerprint, node_id, token_id, now_ms, cert.not_after_ms, cert.issuer_sha256],
    )
}

/// A token's secret hash, expiry, uses left and revocation time.
type TokenRow = (String, Option<i64>, Option<i64>, Option<i64>);

/// What a certificate fingerprint names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertStatus {
    /// A live certificate of this node.
    Node(String),
    /// A certificate of this node, revoked.
    Revoked(String),
    /// No certificate this coordinator issued.
    Unknown,
}

impl Store {
    /// Stores a new join token (its secret hashed).
    pub fn create_token(
        &mut self,
        token: &tidemill_runtime::identity::JoinToken,
        description: &str,
        now_ms: i64,
        expires_ms: Option<i64>,
        uses: Option<i64>,
    ) -> Result<(), StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            tx.execute(
                "INSERT INTO join_tokens (id, secret_sha256, description, created_ms, expires_ms, uses_left)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![token.id, sha256_hex(token.secret.as_bytes()), description, now_ms, expires_ms, uses],
            )
            .map_err(&err)?;
            Ok(())
        })
    }

    /// Every join token, newest first.
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, description, created_ms, expires_ms, uses_left, used, revoked_ms
                 FROM join_tokens ORDER BY created_ms DESC, id",
            )
            .map_err(&err)?;
        stmt.query_map([], |r| {
            Ok(TokenRecord {
                id: r.get(0)?,
                description: r.get(1)?,
                created_ms: r.get(2)?,
                expires_ms: r.get(3)?,
                uses_left: r.get(4)?,
                used: r.get(5)?,
                revoked_ms: r.get(6)?,
            })
        })
        .map_err(&err)?
        .collect::<Result<_, _>>()
        .map_err(&err)
    }

    /// Revokes a join token; `false` if there is none by that id.
    pub fn revoke_token(&mut self, id: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.revoke_in("join_tokens", id, now_ms)
    }

    /// Marks token `id` of `table` (join or API tokens) revoked, keeping the
    /// first revocation time; `false` if there is none by that id.
    fn revoke_in(
        &mut self,
        table: &'static str,
        id: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let n = tx
                .execute(
                    &format!(
                        "UPDATE {table} SET revoked_ms = COALESCE(revoked_ms, ?2) WHERE id = ?1"
                    ),
                    params![id, now_ms],
                )
                .map_err(&err)?;
            Ok(n == 1)
        })
    }

    /// Spends one use of a token on the certificate with `fingerprint`
    /// (expiring at `not_after_ms`) for `node_id`, in one transaction: a join
    /// either happens whole or leaves no trace.
    pub fn join(
        &mut self,
        token_id: &str,
        secret: &str,
        node_id: &str,
        cert: CertRecord<'_>,
        now_ms: i64,
    ) -> Result<Result<(), JoinRefusal>, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let row: Option<TokenRow> = tx
                .query_row(
                    "SELECT secret_sha256, expires_ms, uses_left, revoked_ms FROM join_tokens WHERE id = ?1",
                    [token_id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .map_err(&err)?;
            let Some((hash, expires, uses, revoked)) = row else {
                return Ok(Err(JoinRefusal::BadToken));
            };
            if !secret_matches(&hash, secret) {
                return Ok(Err(JoinRefusal::BadToken));
            }
            let id = token_id.to_string();
            if revoked.is_some() {
                return Ok(Err(JoinRefusal::Revoked(id)));
            }
            if expires.is_some_and(|e| e <= now_ms) {
                return Ok(Err(JoinRefusal::Expired(id)));
            }
            if uses.is_some_and(|u| u <= 0) {
                return Ok(Err(JoinRefusal::UsedUp(id)));
            }
            let live: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM node_certs WHERE node_id = ?1 AND revoked_ms IS NULL AND not_after_ms > ?2",
                    params![node_id, now_ms],
                    |r| r.get(0),
                )
                .map_err(&err)?;
            if live > 0 {
                return Ok(Err(JoinRefusal::Taken(node_id.to_string())));
            }
            tx.execute(
                "UPDATE join_tokens SET used = used + 1, uses_left = uses_left - 1 WHERE id = ?1",
                [token_id],
            )
            .map_err(&err)?;
            insert_cert(tx, cert, node_id, token_id, now_ms).map_err(&err)?;
            // A node joined anew (after `nodes remove`) records its
            // capabilities afresh at its first hello.
            tx.execute(
                "UPDATE nodes SET joined_capabilities = NULL, claimed_capabilities = NULL WHERE id = ?1",
                [node_id],
            )
            .map_err(&err)?;
            event(tx, now_ms, Some(node_id), None, "node-joined", &format!("token {token_id}"))
                .map_err(&err)?;
            Ok(Ok(()))
        })
    }

    /// Records a renewed certificate for `node_id` and revokes every other
    /// one but `in_use` (the certificate of the connection that asked), so a
    /// node holds at most two valid certificates: the one it is connected
    /// with, which a reconnect before the new one is stored still uses, and
    /// the new one. Returns how many were revoked.
    pub fn renew(
        &mut self,
        node_id: &str,
        cert: CertRecord<'_>,
        in_use: &str,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let revoked = tx
                .execute(
                    "UPDATE node_certs SET revoked_ms = ?3
                     WHERE node_id = ?1 AND fingerprint != ?2 AND revoked_ms IS NULL",
                    params![node_id, in_use, now_ms],
                )
                .map_err(&err)?;
            insert_cert(tx, cert, node_id, "renewal", now_ms).map_err(&err)?;
            event(
                tx,
                now_ms,
                Some(node_id),
                None,
                "node-renewed",
                cert.fingerprint,
            )
            .map_err(&err)?;
            Ok(revoked)
        })
    }

    /// How many certificates `node_id` was issued by renewal since `since_ms`.
    pub fn renewals_since(&self, node_id: &str, since_ms: i64) -> Result<u64, StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM node_certs
                 WHERE node_id = ?1 AND token_id = 'renewal' AND issued_ms > ?2",
                params![node_id, since_ms],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(self.sql_err())
    }

    /// How many valid (unrevoked, unexpired) certificates `node_id` holds.
    pub fn valid_certs(&self, node_id: &str, now_ms: i64) -> Result<u64, StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM node_certs
                 WHERE node_id = ?1 AND revoked_ms IS NULL AND not_after_ms > ?2",
                params![node_id, now_ms],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(self.sql_err())
    }

    /// For a CA rotation: how many nodes with a live certificate there are,
    /// and how many of them hold one from the CA `issuer_sha256`.
    pub fn rotation_progress(
        &self,
        issuer_sha256: &str,
        now_ms: i64,
    ) -> Result<(u64, u64), StoreError> {
        let err = self.sql_err();
        self.conn
            .query_row(
                "SELECT COUNT(DISTINCT node_id),
                        COUNT(DISTINCT CASE WHEN issuer_sha256 = ?1 THEN node_id END)
                 FROM node_certs WHERE revoked_ms IS NULL AND not_after_ms > ?2",
                params![issuer_sha256, now_ms],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
            .map_err(err)
    }

    /// What the certificate with this fingerprint names.
    pub fn cert_status(&self, fingerprint: &str) -> Result<CertStatus, StoreError> {
        let err = self.sql_err();
        let row: Option<(String, Option<i64>)> = self
            .conn
            .query_row(
                "SELECT node_id, revoked_ms FROM node_certs WHERE fingerprint = ?1",
                [fingerprint],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(&err)?;
        Ok(match row {
            Some((node, None)) => CertStatus::Node(node),
            Some((node, Some(_))) => CertStatus::Revoked(node),
            None => CertStatus::Unknown,
        })
    }

    /// Revokes every certificate of `node_id` and forgets its forecast and
    /// links; its history (reports, tasks) stays. Returns how many
    /// certificates were revoked.
    pub fn remove_node(&mut self, node_id: &str, now_ms: i64) -> Result<usize, StoreError> {
        let err = self.sql_err();
        self.forecasts.forget(node_id);
        self.write(|tx| {
            let n = tx
                .execute(
                    "UPDATE node_certs SET revoked_ms = ?2 WHERE node_id = ?1 AND revoked_ms IS NULL",
                    params![node_id, now_ms],
                )
                .map_err(&err)?;
            tx.execute("DELETE FROM forecasts WHERE node_id = ?1", [node_id])
                .map_err(&err)?;
            tx.execute(
                "DELETE FROM links WHERE from_node = ?1 OR to_node = ?1",
                [node_id],
            )
            .map_err(&err)?;
            tx.execute("UPDATE nodes SET online = 0 WHERE id = ?1", [node_id])
                .map_err(&err)?;
            event(tx, now_ms, Some(node_id), None, "node-removed", "certificates revoked")
                .map_err(&err)?;
            Ok(n)
        })
    }
}

impl Store {
    /// Stores a new API token with `scope` (its secret hashed).
    pub fn create_api_token(
        &mut self,
        id: &str,
        secret: &str,
        scope: &str,
        description: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            tx.execute(
                "INSERT INTO api_tokens (id, secret_sha256, scope, description, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    id,
                    sha256_hex(secret.as_bytes()),
                    scope,
                    description,
                    now_ms
                ],
            )
            .map_err(&err)?;
            Ok(())
        })
    }

    /// The scope of the live API token `id` whose secret is `secret`.
    pub fn api_token_scope(&self, id: &str, secret: &str) -> Result<Option<String>, StoreError> {
        let err = self.sql_err();
        let row: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT secret_sha256, scope FROM api_tokens WHERE id = ?1 AND revoked_ms IS NULL",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(&err)?;
        Ok(row.and_then(|(hash, scope)| secret_matches(&hash, secret).then_some(scope)))
    }

    /// Every API token, newest first.
    pub fn api_tokens(&self) -> Result<Vec<ApiTokenRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, scope, description, created_ms, revoked_ms FROM api_tokens
                 ORDER BY created_ms DESC, id",
            )
            .map_err(&err)?;
        stmt.query_map([], |r| {
            Ok(ApiTokenRecord {
                id: r.get(0)?,
                scope: r.get(1)?,
                description: r.get(2)?,
                created_ms: r.get(3)?,
                revoked_ms: r.get(4)?,
            })
        })
        .map_err(&err)?
        .collect::<Result<_, _>>()
        .map_err(&err)
    }

    /// Revokes an API token; `false` if there is none by that id.
    pub fn revoke_api_token(&mut self, id: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.revoke_in("api_tokens", id, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testkit::on_both_backends;
    use tidemill_runtime::identity::JoinToken;

    fn issue(fp: &str) -> CertRecord<'_> {
        CertRecord {
            fingerprint: fp,
            not_after_ms: 10_000,
            issuer_sha256: "ca",
        }
    }

    on_both_backends! {
        fn a_token_joins_within_its_limits_and_a_node_id_once(db) {
            let mut store = db.open();
            let t = JoinToken::generate(&"0".repeat(64));
            store
                .create_token(&t, "two edges", 0, Some(5_000), Some(2))
                .unwrap();
            let listed = store.tokens().unwrap();
            assert_eq!(
                (listed[0].id.as_str(), listed[0].uses_left),
                (t.id.as_str(), Some(2))
            );

            let bad = store.join(&t.id, "wrong", "e1", issue("f0"), 1).unwrap();
            assert_eq!(bad, Err(JoinRefusal::BadToken));
            assert_eq!(
                store.join(&t.id, &t.secret, "e1", issue("f1"), 1).unwrap(),
                Ok(())
            );
            assert_eq!(
                store.cert_status("f1").unwrap(),
                CertStatus::Node("e1".into())
            );
            assert_eq!(store.cert_status("f0").unwrap(), CertStatus::Unknown);
            assert_eq!(
                store.join(&t.id, &t.secret, "e1", issue("f2"), 2).unwrap(),
                Err(JoinRefusal::Taken("e1".into()))
            );
            assert_eq!(
                store.join(&t.id, &t.secret, "e2", issue("f3"), 2).unwrap(),
                Ok(())
            );
            assert_eq!(
                store.join(&t.id, &t.secret, "e3", issue("f4"), 3).unwrap(),
                Err(JoinRefusal::UsedUp(t.id.clone()))
            );

            assert_eq!(store.remove_node("e1", 4).unwrap(), 1);
            assert_eq!(
                store.cert_status("f1").unwrap(),
                CertStatus::Revoked("e1".into())
            );

            let u = JoinToken::generate(&"0".repeat(64));
            store.create_token(&u, "", 0, Some(5_000), None).unwrap();
            assert_eq!(
                store.join(&u.id, &u.secret, "e1", issue("f5"), 5).unwrap(),
                Ok(())
            );
            assert_eq!(
                store
                    .join(&u.id, &u.secret, "e4", issue("f6"), 5_000)
                    .unwrap(),
                Err(JoinRefusal::Expired(u.id.clone()))
            );
            assert!(store.revoke_token(&u.id, 6).unwrap());
            assert!(!store.revoke_token("nope", 6).unwrap());
            assert_eq!(
                store.join(&u.id, &u.secret, "e4", issue("f7"), 7).unwrap(),
                Err(JoinRefusal::Revoked(u.id.clone()))
            );
        }
    }

    on_both_backends! {
        fn a_renewal_keeps_the_certificate_in_use_and_the_new_one_only(db) {
            let mut store = db.open();
            let t = JoinToken::generate(&"0".repeat(64));
            store.create_token(&t, "", 0, None, None).unwrap();
            store
                .join(&t.id, &t.secret, "e1", issue("a"), 1)
                .unwrap()
                .unwrap();
            assert_eq!(store.renew("e1", issue("b"), "a", 2).unwrap(), 0);
            // A node that lost "b" before storing it renews again over "a".
            assert_eq!(store.renew("e1", issue("c"), "a", 3).unwrap(), 1);
            assert_eq!(
                store.cert_status("b").unwrap(),
                CertStatus::Revoked("e1".into())
            );
            assert_eq!(store.renew("e1", issue("d"), "c", 4).unwrap(), 1);
            assert_eq!(
                store.cert_status("c").unwrap(),
                CertStatus::Node("e1".into())
            );
            assert_eq!(store.valid_certs("e1", 5).unwrap(), 2);
            assert_eq!(store.renewals_since("e1", 2).unwrap(), 2);
        }
    }
}
