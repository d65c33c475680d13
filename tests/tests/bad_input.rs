//! Garbage at the QUIC port: every kind is refused with an error and a log
//! line, and the coordinator keeps serving its edges throughout.

use tidemill_proto::{Capabilities, CloudMsg, EdgeMsg, ErrorCode, Hello, MAX_FRAME_LEN};
use tidemill_runtime::identity::{JoinToken, NodeKeyPair, request_certificate};
use tidemill_runtime::{frames, quic};
mod support;

use support::{Coordinator, PATIENCE, start_edge, write_trace};

/// Writes raw bytes on a new stream and returns the coordinator's reply.
async fn raw_request(conn: &quinn::Connection, bytes: &[u8]) -> CloudMsg {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    // The coordinator may stop reading an oversized frame early; that is fine.
    let _ = send.write_all(bytes).await;
    let _ = send.finish();
    frames::read_msg(&mut recv).await.unwrap().expect("a reply")
}

fn refusal(reply: CloudMsg) -> ErrorCode {
    match reply {
        CloudMsg::Error(e) => e.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A hello from `node`.
fn hello(node: &str) -> EdgeMsg {
    EdgeMsg::Hello(Hello {
        node_id: node.into(),
        capabilities: Capabilities {
            cpu_cores: 1,
            mem_bytes: 1,
            accelerators: vec![],
            os: "test".into(),
            arch: "test".into(),
            daemon_version: "0".into(),
        },
        probe_port: None,
        site: None,
    })
}

#[test]
fn garbage_is_refused_and_logged_while_edges_are_served() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut cloud = coord.start();
    let trace = write_trace(dir.path(), &["e1"]);
    let _edge = start_edge(&coord, dir.path(), "e1", Some(&trace));
    cloud.wait_for("edge connected", 1, PATIENCE);

    // 1. Random bytes over UDP: short- and long-header shapes and junk.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..64 {
        let len = [25, 200, 1200, 1400][i % 4];
        let mut datagram: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        datagram[0] = [0x40, 0xc0, 0x00, 0xff][i % 4];
        udp.send_to(&datagram, coord.quic).unwrap();
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // 2. A client speaking another protocol version.
        let other =
            quic::anonymous_client(&coord.ca(), quic::Timing::default(), b"tidemill/99").unwrap();
        let err = other
            .connect(coord.quic, "localhost")
            .unwrap()
            .await
            .expect_err("refused");
        assert!(quic::is_version_mismatch(&err), "{err}");

        // 3. A hello without a certificate is refused.
        let anonymous =
            quic::anonymous_client(&coord.ca(), quic::Timing::default(), tidemill_proto::ALPN)
                .unwrap();
        let conn = anonymous
            .connect(coord.quic, "localhost")
            .unwrap()
            .await
            .unwrap();
        let anonymous_hello = hello("e1");
        let refused = tokio::time::timeout(
            PATIENCE,
            frames::request::<_, CloudMsg>(&conn, &anonymous_hello),
        )
        .await
        .unwrap();
        assert!(
            matches!(&refused, Ok(CloudMsg::Error(e)) if e.code == ErrorCode::Unauthorized),
            "{refused:?}"
        );

        // 4. On a joined node's connection: an oversized, a malformed and a truncated frame.
        let token: JoinToken = coord.token().parse().unwrap();
        let joiner = quic::joiner(&token.ca_sha256, quic::Timing::default()).unwrap();
        let conn = joiner
            .connect(coord.quic, "localhost")
            .unwrap()
            .await
            .unwrap();
        let key = NodeKeyPair::generate().unwrap();
        let issued = request_certificate(&conn, &token, "prober", &key)
            .await
            .unwrap();
        let client = quic::client(&key.into_identity(issued), quic::Timing::default()).unwrap();
        // A hello naming a site that is no site (a path) is refused, and says why.
        let conn = client
            .connect(coord.quic, "localhost")
            .unwrap()
            .await
            .unwrap();
        let EdgeMsg::Hello(mut bad_site) = hello("prober") else {
            unreachable!()
        };
        bad_site.site = Some("../../etc".into());
        let refused = tokio::time::timeout(
            PATIENCE,
            frames::request::<_, CloudMsg>(&conn, &EdgeMsg::Hello(bad_site)),
        )
        .await
        .unwrap();
        // The reason comes as an error frame, or as the connection's close
        // reason when the close overtakes it.
        let why = match &refused {
            Ok(CloudMsg::Error(e)) if e.code == ErrorCode::UnexpectedMessage => e.message.clone(),
            Err(e) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert!(
            why.contains("../../etc") && why.contains("is invalid: use 1 to 64 lower-case"),
            "{why}"
        );
        let conn = client
            .connect(coord.quic, "localhost")
            .unwrap()
            .await
            .unwrap();
        let hello = hello("prober");
        let welcome = tokio::time::timeout(PATIENCE, frames::request::<_, CloudMsg>(&conn, &hello))
            .await
            .unwrap();
        assert!(matches!(welcome, Ok(CloudMsg::Welcome(_))), "{welcome:?}");

        let mut oversized = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes().to_vec();
        oversized.extend(vec![0u8; 64 * 1024]);
        assert_eq!(
            refusal(raw_request(&conn, &oversized).await),
            ErrorCode::FrameTooLarge
        );
        let mut malformed = 8u32.to_be_bytes().to_vec();
        malformed.extend([0xc1; 8]);
        assert_eq!(
            refusal(raw_request(&conn, &malformed).await),
            ErrorCode::MalformedFrame
        );
        let mut truncated = 100u32.to_be_bytes().to_vec();
        truncated.extend([0x90; 10]);
        assert_eq!(
            refusal(raw_request(&conn, &truncated).await),
            ErrorCode::MalformedFrame
        );
        conn.close(0u32.into(), b"done");
        client.wait_idle().await;
    });

    // Each refusal is logged.
    cloud.wait_for(
        "refused a connection: the peer does not speak tidemill/4",
        1,
        PATIENCE,
    );
    cloud.wait_for("refused a frame", 3, PATIENCE);
    cloud.wait_for("a hello without a node certificate", 1, PATIENCE);
    let log = cloud.log().join("\n");
    assert!(
        log.contains("FrameTooLarge") && log.contains("MalformedFrame"),
        "{log}"
    );
    assert!(
        log.contains("dropping packet with invalid CID") || log.contains("malformed header"),
        "random datagrams are logged as refused:\n{log}"
    );

    // The coordinator kept serving the edge: it is alive and still storing
    // fresh reports from e1 after all of the above.
    let stored_before = cloud
        .log()
        .iter()
        .filter(|l| l.contains("report stored") && l.contains("node_id=e1"))
        .count();
    cloud.wait_until("fresh reports from e1", stored_before + 5, PATIENCE, |l| {
        l.contains("report stored") && l.contains("node_id=e1")
    });
    assert!(cloud.alive(), "the coordinator is still running");
    let e1 = coord
        .nodes()
        .into_iter()
        .find(|n| n["id"] == "e1")
        .expect("e1 is known");
    assert_eq!(e1["online"], true, "{e1}");
}
