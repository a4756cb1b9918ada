//! Connection limits through raw sockets: idle and slow-header connections are closed after the
//! header-read timeout, a slow body gets 408, and a client that half-closes after sending its
//! request still gets the response.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::{engine_config, serial, server_config, tiny_llama, TestServer};

const TIMEOUT: Duration = Duration::from_secs(1);

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s
}

/// Reads until the server closes; returns what arrived and how long it took.
fn read_to_close(s: &mut TcpStream) -> (String, Duration) {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => out.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("still open after {:?}: {e}", start.elapsed()),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), start.elapsed())
}

const BODY: &str = r#"{"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0}"#;

fn request_head(len: usize, connection: &str) -> String {
    format!(
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: {connection}\r\n\r\n"
    )
}

#[test]
fn idle_slow_and_half_closed_connections() {
    let _g = serial();
    let mut engine = engine_config();
    engine.max_num_seqs = 4;
    let mut config = server_config();
    config.header_read_timeout = TIMEOUT;
    let server = TestServer::start(tiny_llama(), engine, config);
    let addr = server.addr;

    // A socket that never sends anything is closed.
    let mut idle = connect(addr);
    let (got, took) = read_to_close(&mut idle);
    assert!(!got.contains(" 200 "), "{got}");
    assert!(took < Duration::from_secs(10), "{took:?}");

    // A header trickling in slower than the timeout is cut off, never served.
    let mut slow = connect(addr);
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        .expect("write");
    std::thread::sleep(TIMEOUT * 2);
    let _ = slow.write_all(b"X-Late: 1\r\n\r\n");
    let (got, _) = read_to_close(&mut slow);
    assert!(!got.contains(" 200 "), "{got}");

    // A kept-alive connection is closed once idle for the timeout after its response.
    let mut kept = connect(addr);
    kept.write_all(format!("{}{BODY}", request_head(BODY.len(), "keep-alive")).as_bytes())
        .expect("write");
    let (got, took) = read_to_close(&mut kept);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(took < Duration::from_secs(10), "{took:?}");

    // A body slower than the timeout gets 408 in OpenAI's shape.
    let mut slow_body = connect(addr);
    slow_body
        .write_all(format!("{}{}", request_head(BODY.len(), "close"), &BODY[..10]).as_bytes())
        .expect("write");
    let (got, _) = read_to_close(&mut slow_body);
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("request_timeout"), "{got}");

    // Half-close after sending: the response still arrives.
    let mut half = connect(addr);
    half.write_all(format!("{}{BODY}", request_head(BODY.len(), "close")).as_bytes())
        .expect("write");
    half.shutdown(Shutdown::Write).expect("half-close");
    let (got, _) = read_to_close(&mut half);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("\"completion_tokens\":2"), "{got}");
    server.stop();
}
