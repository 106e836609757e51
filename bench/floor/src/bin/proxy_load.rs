//! The capture bench's load client: POSTs one request over and over on N connections for some
//! seconds and prints requests per second, as JSON. `direct` sends it to the daemon's base-URL
//! route; `proxy` sends it as a client behind `HTTPS_PROXY` does (CONNECT with the test's
//! credentials, TLS with the run's CA, then the request), both over HTTP/1.1 kept alive. With
//! `--fresh`, every request opens a new connection (and, through the proxy, a new tunnel and
//! TLS handshake): the cost of a new connection.
//!
//!   proxy_load MODE DAEMON_ADDR TEST_ID CA_PEM CONNS SECONDS [--fresh]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BODY: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"short"}]}"#;
const HOST: &str = "api.openai.com";

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> Io for T {}

async fn open(
    proxy: bool,
    addr: &str,
    token: &str,
    tls: &Arc<rustls::ClientConfig>,
) -> Box<dyn Io> {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).unwrap();
    if !proxy {
        return Box::new(tcp);
    }
    let auth = b64(&format!("{}:", b64(token, true)), false);
    tcp.write_all(
        format!("CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\nProxy-Authorization: Basic {auth}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut byte).await.expect("a CONNECT answer");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    let connector = tokio_rustls::TlsConnector::from(tls.clone());
    let name = rustls::pki_types::ServerName::try_from(HOST).unwrap();
    Box::new(connector.connect(name, tcp).await.expect("TLS with the run's CA"))
}

/// Base64 of `s`: standard with padding, or URL-safe without (a test's token).
fn b64(s: &str, url: bool) -> String {
    let t: &[u8; 64] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(t[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else if !url {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let proxy = args[1] == "proxy";
    let (addr, test, ca) = (args[2].clone(), args[3].clone(), args[4].clone());
    let conns: usize = args[5].parse().unwrap();
    let secs: u64 = args[6].parse().unwrap();
    let fresh = args.get(7).is_some_and(|a| a == "--fresh");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(&ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = Arc::new(config);
    let path = if proxy {
        "/v1/chat/completions".to_string()
    } else {
        format!("/t/{test}/openai/v1/chat/completions")
    };
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (addr, token, tls, done, path) =
            (addr.clone(), test.clone(), tls.clone(), done.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let io = open(proxy, &addr, &token, &tls).await;
                let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
                    .await
                    .unwrap();
                tokio::spawn(conn);
                loop {
                    let req = hyper::Request::post(path.as_str())
                        .header("host", if proxy { HOST } else { addr.as_str() })
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                        .unwrap();
                    let answer = send.send_request(req).await.expect("an answer");
                    let status = answer.status();
                    let body = answer.into_body().collect().await.unwrap().to_bytes();
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    done.fetch_add(1, Ordering::Relaxed);
                    if fresh || Instant::now() >= deadline {
                        break;
                    }
                }
            }
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    println!("{{\"requests\": {n}, \"seconds\": {elapsed:.3}, \"rps\": {:.1}}}", n as f64 / elapsed);
}
