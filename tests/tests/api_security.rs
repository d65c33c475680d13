//! The operator API: tokens with scopes, no clear-text remote listener,
//! secrets kept out of listings and logs, HTTPS with the coordinator's CA,
//! and bad input answered with a clear 4xx while memory stays bounded.

mod support;

use std::process::Command;

use support::{CLOUD, Coordinator};

/// Sends a raw HTTP/1.1 request, with `token` as a bearer token if given, and
/// returns the status code and the body.
fn http(
    coord: &Coordinator,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    coord.request(method, path, auth.as_deref(), body)
}

fn job(name: &str, extra: &str) -> Vec<u8> {
    format!(r#"{{"name":{name},"command":["true"],"deadline":"2099-01-01T00:00:00Z"{extra}}}"#)
        .into_bytes()
}

/// An API token of `scope`, made with the admin token over loopback.
fn api_token(coord: &Coordinator, admin: &str, scope: &str) -> String {
    let out = coord.cli(&[
        "api-token",
        "create",
        "--scope",
        scope,
        "--api-token",
        admin,
    ]);
    out.lines().last().unwrap().trim().to_string()
}

#[test]
fn a_remote_clear_text_api_is_refused_at_start() {
    let dir = support::tempdir();
    let out = Command::new(CLOUD)
        .args([
            "serve",
            "--api-listen",
            "0.0.0.0:0",
            "--quic-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("api_listen") && err.contains("[api] tls = true"),
        "{err}"
    );
}

#[test]
fn tokens_scopes_and_secrets() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    // The defaults: no token, no access, loopback or not.
    let cloud = coord.start();
    let admin = coord.admin_token();
    let admin = admin.as_str();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(coord.data_dir.join("admin-token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let secret_job = job(
        "\"with-secret\"",
        r#","secret_env":{"HF_TOKEN":"hf_s3cr3tvalue"}"#,
    );
    let (status, body) = http(&coord, "POST", "/v1/jobs", None, &secret_job);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("--api-token"), "{body}");
    let (status, _) = http(&coord, "GET", "/v1/jobs", Some("tmanope.wrong"), b"");
    assert_eq!(status, 401);
    assert_eq!(http(&coord, "GET", "/healthz", None, b"").0, 200);

    let reader = api_token(&coord, admin, "read");
    let (status, body) = http(&coord, "POST", "/v1/jobs", Some(&reader), &secret_job);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("scope read"), "{body}");
    let (status, _) = http(&coord, "GET", "/v1/tokens", Some(&reader), b"");
    assert_eq!(status, 403);

    let submitter = api_token(&coord, admin, "submit");
    let (status, body) = http(&coord, "POST", "/v1/jobs", Some(&submitter), &secret_job);
    assert_eq!(status, 201, "{body}");
    let other = api_token(&coord, admin, "submit");
    let (status, body) = http(&coord, "POST", "/v1/jobs/1/cancel", Some(&other), b"");
    assert_eq!(status, 403, "another submitter cannot cancel it: {body}");

    // The secret is in no listing and no log line.
    let (status, list) = http(&coord, "GET", "/v1/jobs", Some(&reader), b"");
    assert_eq!(status, 200);
    assert!(
        list.contains("HF_TOKEN") && !list.contains("hf_s3cr3tvalue"),
        "{list}"
    );
    let shown = coord.cli(&["jobs", "show", "1", "--json", "--api-token", &reader]);
    assert!(!shown.contains("hf_s3cr3tvalue"), "{shown}");
    assert!(!cloud.log().join("\n").contains("hf_s3cr3tvalue"));
    assert!(
        !cloud
            .log()
            .join("\n")
            .contains(admin.split('.').nth(1).unwrap())
    );

    // A revoked token stops working.
    let id = reader.split('.').next().unwrap();
    coord.cli(&["api-token", "revoke", id, "--api-token", admin]);
    assert_eq!(http(&coord, "GET", "/v1/jobs", Some(&reader), b"").0, 401);
}

#[test]
fn bad_input_gets_a_clear_4xx() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let admin = coord.admin_token();
    let admin = Some(admin.as_str());
    let post = |body: &[u8]| http(&coord, "POST", "/v1/jobs", admin, body);

    let huge = vec![b'x'; 50 << 20];
    let (status, _) = post(&huge);
    assert_eq!(status, 413, "a 50 MB body");
    let (status, _) = post(&job(&format!("\"{}\"", "n".repeat(1_900_000)), ""));
    assert_eq!(status, 413, "a 1.9 MB name");
    let (status, body) = post(&job(&format!("\"{}\"", "n".repeat(65)), ""));
    assert!(status == 400 && body.contains("1 to 64"), "{status} {body}");
    let (status, body) = post(&job("\"two\\nlines\"", ""));
    assert!(status == 400 && body.contains("name"), "{status} {body}");
    let big_env = format!(r#","env":{{"BIG":"{}"}}"#, "v".repeat(100_000));
    let (status, body) = post(&job("\"big-env\"", &big_env));
    assert!(status == 400 && body.contains("64 KiB"), "{status} {body}");
    let old = br#"{"name":"old","command":["true"],"deadline":"1970-01-02T00:00:00Z"}"#;
    let (status, body) = post(old);
    assert!(
        status == 400 && body.contains("already past"),
        "{status} {body}"
    );
    let allowed = br#"{"name":"old","command":["true"],"deadline":"1970-01-02T00:00:00Z","allow_past_deadline":true}"#;
    assert_eq!(post(allowed).0, 201);
    for k in 0..3 {
        assert_eq!(post(&job(&format!("\"j{k}\""), "")).0, 201);
    }
    // A job that ended cannot be cancelled, and the answer says so.
    let (status, body) = http(&coord, "POST", "/v1/jobs/1/cancel", admin, b"");
    assert_eq!(status, 200, "cancelling a queued job: {body}");
    let (status, body) = http(&coord, "POST", "/v1/jobs/1/cancel", admin, b"");
    assert!(
        status == 409 && body.contains("already ended"),
        "{status} {body}"
    );
    let (status, page) = http(&coord, "GET", "/v1/jobs?limit=2", admin, b"");
    let page: Vec<serde_json::Value> = serde_json::from_str(&page).unwrap();
    assert_eq!((status, page.len()), (200, 2));
    let last = page[1]["id"].as_u64().unwrap();
    let (_, next) = http(
        &coord,
        "GET",
        &format!("/v1/jobs?limit=2&before={last}"),
        admin,
        b"",
    );
    let next: Vec<serde_json::Value> = serde_json::from_str(&next).unwrap();
    assert_eq!(next[0]["id"].as_u64().unwrap(), last - 1);
}

#[test]
fn the_api_speaks_https_with_the_coordinators_ca() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start_with(&[("tls = false", "tls = true")]);
    let admin = std::fs::read_to_string(coord.data_dir.join("admin-token")).unwrap();
    let https = coord.api.replace("http://", "https://");
    let run = |api: &str, ca: Option<&std::path::Path>| {
        let mut cmd = Command::new(CLOUD);
        cmd.args([
            "jobs",
            "list",
            "--json",
            "--api",
            api,
            "--api-token",
            admin.trim(),
        ]);
        if let Some(ca) = ca {
            cmd.arg("--api-ca").arg(ca);
        }
        cmd.output().unwrap()
    };
    let ok = run(&https, Some(&coord.ca()));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "[]");
    // Clear text to a TLS port, or TLS without the CA, fails.
    assert!(!run(&coord.api, None).status.success());
    assert!(!run(&https, None).status.success());
}
