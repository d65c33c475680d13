//! What `tidemill-edge doctor` and `tidemill-cloud doctor` share: a report of
//! checks, each ok, warn or fail with the sentence that fixes it, and the
//! certificate, disk and clock checks both daemons need.

use std::path::Path;
use std::time::Duration;

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::tls::TlsError;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Works, but something is degraded or soon will be.
    Warn,
    /// Broken: the daemon cannot work as configured.
    Fail,
}

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct Check {
    /// Short name, such as `certificate`.
    pub name: &'static str,
    /// The outcome.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// How to fix it; empty when ok.
    pub fix: String,
}

/// The checks of one doctor run, printed as they are added.
#[derive(Debug, Default)]
pub struct Report {
    checks: Vec<Check>,
}

impl Report {
    /// Records and prints a passed check.
    pub fn ok(&mut self, name: &'static str, detail: impl Into<String>) {
        self.add(name, Status::Ok, detail.into(), String::new());
    }

    /// Records and prints a warning with its fix.
    pub fn warn(&mut self, name: &'static str, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(name, Status::Warn, detail.into(), fix.into());
    }

    /// Records and prints a failure with its fix.
    pub fn fail(&mut self, name: &'static str, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(name, Status::Fail, detail.into(), fix.into());
    }

    fn add(&mut self, name: &'static str, status: Status, detail: String, fix: String) {
        let tag = match status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        println!("{tag:<5} {name:<14} {detail}");
        if !fix.is_empty() {
            println!("{:<20} fix: {fix}", "");
        }
        self.checks.push(Check {
            name,
            status,
            detail,
            fix,
        });
    }

    /// Every check so far.
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// Whether no check failed (warnings allowed): the exit status.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }
}

/// Space below which a data dir's disk is worth a warning.
pub const LOW_DISK_BYTES: u64 = 1 << 30;

/// Checks that `dir` exists, is writable and has space.
pub fn data_dir(report: &mut Report, dir: &Path) {
    if !dir.is_dir() {
        report.fail(
            "data dir",
            format!("{} does not exist", dir.display()),
            "create it (install.sh does), or point data_dir at the daemon's data dir",
        );
        return;
    }
    if let Err(e) = crate::datadir::check_writable(dir) {
        report.fail(
            "data dir",
            format!("{} is not writable: {e}", dir.display()),
            "run as the daemon's user (root for the edge, tidemill for the coordinator) or fix the owner",
        );
        return;
    }
    match crate::datadir::free_bytes(dir) {
        Ok(free) if free < LOW_DISK_BYTES => report.warn(
            "disk",
            format!("{} MiB free under {}", free >> 20, dir.display()),
            "free space or move data_dir: below 1 GiB journals, checkpoints and the store may fill the disk",
        ),
        Ok(free) => report.ok(
            "data dir",
            format!("{} is writable, {:.1} GiB free", dir.display(), free as f64 / (1u64 << 30) as f64),
        ),
        Err(e) => report.warn(
            "disk",
            format!("cannot read the free space under {}: {e}", dir.display()),
            "check the file system with df",
        ),
    }
}

/// The validity window of a certificate, Unix ms: (not before, not after).
pub fn validity_ms(cert: &CertificateDer<'_>) -> Option<(i64, i64)> {
    yasna::parse_der(cert.as_ref(), |r| {
        r.read_sequence(|r| {
            let window = r.next().read_sequence(|r| {
                r.read_optional(|r| r.read_tagged(yasna::Tag::context(0), |r| r.read_der()))?;
                r.next().read_der()?; // serial number
                r.next().read_der()?; // signature algorithm
                r.next().read_der()?; // issuer
                let window = r
                    .next()
                    .read_sequence(|r| Ok((time(r.next())?, time(r.next())?)))?;
                r.next().read_der()?; // subject
                r.next().read_der()?; // public key
                while r.read_optional(|r| r.read_der())?.is_some() {}
                Ok(window)
            })?;
            r.next().read_der()?; // signature algorithm
            r.next().read_der()?; // signature
            Ok(window)
        })
    })
    .ok()
}

/// An X.509 time: UTCTime or GeneralizedTime, as Unix ms.
fn time(r: yasna::BERReader<'_, '_>) -> yasna::ASN1Result<i64> {
    let tag = r.lookahead_tag()?;
    if tag == yasna::tags::TAG_UTCTIME {
        let t = r.read_utctime()?;
        Ok(t.datetime().unix_timestamp() * 1000)
    } else {
        let t = r.read_generalized_time()?;
        Ok(t.datetime().unix_timestamp() * 1000)
    }
}

/// Days from `now_ms` to `not_after_ms`, rounded down (negative once past).
pub fn days_left(not_after_ms: i64, now_ms: i64) -> i64 {
    (not_after_ms - now_ms).div_euclid(86_400_000)
}

/// Verifies that `cert` is a client certificate that `cas` issued and that is
/// valid at `now_ms`, as the coordinator checks a node.
pub fn verify_client(
    cert: &CertificateDer<'static>,
    cas: &[CertificateDer<'static>],
    now_ms: i64,
) -> Result<(), String> {
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots(cas)?,
        crate::quic::provider(),
    )
    .build()
    .map_err(|e| e.to_string())?;
    verifier
        .verify_client_cert(cert, &[], unix(now_ms))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Verifies that `cert` is a server certificate for `name` that `cas` issued
/// and that is valid at `now_ms`, as an edge checks the coordinator.
pub fn verify_server(
    cert: &CertificateDer<'static>,
    cas: &[CertificateDer<'static>],
    name: &str,
    now_ms: i64,
) -> Result<(), String> {
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots(cas)?,
        crate::quic::provider(),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(cert, &[], &name, &[], unix(now_ms))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The trust store of the CAs in `cas`.
fn roots(cas: &[CertificateDer<'static>]) -> Result<std::sync::Arc<rustls::RootCertStore>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add(ca.clone()).map_err(|e| e.to_string())?;
    }
    Ok(std::sync::Arc::new(roots))
}

fn unix(ms: i64) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_millis(ms.max(0) as u64))
}

/// Checks a certificate file's first certificate and reports its days left;
/// warns below `warn_days`. Returns the certificates read.
pub fn certificate_file(
    report: &mut Report,
    name: &'static str,
    path: &Path,
    now_ms: i64,
    warn_days: i64,
    fix: &str,
) -> Option<Vec<CertificateDer<'static>>> {
    let certs = match crate::tls::read_certs(path) {
        Ok(certs) => certs,
        Err(e) => {
            let detail = match &e {
                TlsError::Io { source, .. } => format!("{}: {source}", path.display()),
                other => other.to_string(),
            };
            report.fail(name, detail, fix);
            return None;
        }
    };
    match validity_ms(&certs[0]) {
        Some((from, _)) if from > now_ms => report.fail(
            name,
            format!("{} is not valid yet", path.display()),
            "check this machine's clock (timedatectl)",
        ),
        Some((_, until)) if until <= now_ms => {
            report.fail(name, format!("{} has expired", path.display()), fix)
        }
        Some((_, until)) if days_left(until, now_ms) < warn_days => report.warn(
            name,
            format!(
                "{} expires in {} days",
                path.display(),
                days_left(until, now_ms)
            ),
            fix,
        ),
        Some((_, until)) => report.ok(
            name,
            format!(
                "{} valid for {} more days",
                path.display(),
                days_left(until, now_ms)
            ),
        ),
        None => report.fail(
            name,
            format!("{} is not a readable X.509 certificate", path.display()),
            fix,
        ),
    }
    Some(certs)
}

/// Whether the kernel says the clock is synchronised (NTP): certificates,
/// plans and forecasts all depend on it.
pub fn clock(report: &mut Report) {
    // SAFETY: adjtimex with modes 0 only reads the kernel's clock state into
    // the zeroed struct it is given.
    let (state, status) = unsafe {
        let mut t: libc::timex = std::mem::zeroed();
        (libc::adjtimex(&mut t), t.status)
    };
    if state == libc::TIME_ERROR || status & libc::STA_UNSYNC != 0 {
        report.warn(
            "clock",
            "the kernel reports the clock as not synchronised",
            "run an NTP client (systemd-timesyncd or chrony): certificates, deadlines and forecasts need the right time",
        );
    } else if state < 0 {
        report.warn(
            "clock",
            format!(
                "cannot read the clock state: {}",
                std::io::Error::last_os_error()
            ),
            "check that an NTP client runs (timedatectl)",
        );
    } else {
        report.ok("clock", "synchronised (NTP)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_validity_of_an_issued_certificate_and_verifies_its_chain() {
        let dir = tempfile::tempdir().unwrap();
        let now = 1_767_225_600_000;
        let server =
            crate::tls::load_or_create(dir.path(), &["coord.example".into()], now).unwrap();
        let cas = crate::tls::read_certs(&dir.path().join(crate::tls::CA_CERT_FILE)).unwrap();
        let certs = crate::tls::read_certs(&dir.path().join("server.pem")).unwrap();
        let (from, until) = validity_ms(&certs[0]).unwrap();
        assert!(
            from <= now && until > now + 300 * 86_400_000,
            "{from} {until}"
        );
        verify_server(&certs[0], &cas, "coord.example", now).unwrap();
        assert!(verify_server(&certs[0], &cas, "other.example", now).is_err());
        assert!(verify_server(&certs[0], &cas, "coord.example", until + 86_400_000).is_err());
        drop(server);
    }

    #[test]
    fn a_report_passes_with_warnings_and_fails_with_a_failure() {
        let mut r = Report::default();
        r.ok("a", "fine");
        r.warn("b", "meh", "do x");
        assert!(r.passed());
        r.fail("c", "broken", "do y");
        assert!(!r.passed());
        assert_eq!(r.checks().len(), 3);
    }
}
