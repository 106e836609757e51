//! The run's own certificate authority, for the daemon as each test's HTTPS proxy: made at
//! start, its key only in memory, its certificate written where tests are told to trust it
//! (never into the repository), and a leaf certificate per host made on first use and kept.
//! One TLS configuration serves every host; a connection gets a copy that presents its host's
//! leaf, and only the leaves (a certificate and a key, about 1.5 KB) are kept.

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Hosts whose leaf certificates are kept; past this the cache starts afresh (a client naming
/// a new host on every call must not grow the daemon without bound).
const MAX_LEAVES: usize = 10_000;

/// A certificate authority that lives as long as the daemon.
pub struct RunCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
    /// The one configuration every captured host's TLS is served with, but for its leaf.
    base: rustls::ServerConfig,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

/// Presents one host's leaf, whatever the client's SNI says (a client that connects to an
/// address sends none).
#[derive(Debug)]
struct Leaf(Arc<CertifiedKey>);

impl ResolvesServerCert for Leaf {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make a certificate for {what}: {why}")]
pub struct CaError {
    what: String,
    why: String,
}

impl RunCa {
    /// A new authority, named for this run.
    pub fn new() -> Result<RunCa, CaError> {
        let fail = |why: String| CaError {
            what: "the run's certificate authority".into(),
            why,
        };
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| fail(e.to_string()))?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("cargo-llmreplay run CA (pid {})", std::process::id()),
        );
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().map_err(|e| fail(e.to_string()))?;
        let cert = params.self_signed(&key).map_err(|e| fail(e.to_string()))?;
        let mut base = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::server::ResolvesServerCertUsingSni::new()));
        base.alpn_protocols = vec![b"http/1.1".to_vec()];
        // No TLS 1.3 session tickets: a client that reads on one thread while it writes on
        // another (Python's websockets, under the OpenAI SDK's realtime client) can lose its
        // first request when the tickets arrive during that write, and then waits for an answer
        // to a request never sent. Loopback connections gain nothing from resuming.
        base.send_tls13_tickets = 0;
        Ok(RunCa {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
            base,
            leaves: Mutex::default(),
        })
    }

    /// The authority's certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A TLS server configuration presenting a certificate for `host`, whose leaf is made once
    /// per host. A name written with a trailing dot (`api.example.com.`) is the same name, and
    /// its certificate names it without the dot, as clients check it.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CaError> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let leaf = self.leaf(&host)?;
        let mut config = self.base.clone();
        config.cert_resolver = Arc::new(Leaf(leaf));
        Ok(Arc::new(config))
    }

    fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        if let Some(leaf) = self.leaves.lock().expect("ca lock").get(host) {
            return Ok(leaf.clone());
        }
        let fail = |why: String| CaError {
            what: host.to_string(),
            why,
        };
        let mut params = rcgen::CertificateParams::new(vec![host.to_string()])
            .map_err(|e| fail(e.to_string()))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, host.to_string());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().map_err(|e| fail(e.to_string()))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| fail(e.to_string()))?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let signing = self
            .base
            .crypto_provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| fail(e.to_string()))?;
        let leaf = Arc::new(CertifiedKey::new(chain, signing));
        let mut leaves = self.leaves.lock().expect("ca lock");
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_string(), leaf.clone());
        Ok(leaf)
    }
}

/// Writes the bundle for clients whose variable replaces their trust store (`SSL_CERT_FILE`,
/// `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`) into the file `create` makes: the roots they
/// trusted before, then the run's CA. The roots are the user's `SSL_CERT_FILE` when set, else
/// the system's store; they are opened before `create` makes the bundle, which that variable
/// may name.
pub fn write_bundle(
    ca_pem: &str,
    create: impl FnOnce() -> std::io::Result<std::fs::File>,
) -> std::io::Result<()> {
    let own = std::env::var_os("SSL_CERT_FILE").and_then(|f| readable_file(f.as_ref()));
    let roots = own.or_else(system_file);
    roots_then(roots, &mut create()?, ca_pem)
}

/// `roots` (else the system's store, loaded), a newline where they lack their last, then
/// `ca_pem`.
fn roots_then(
    roots: Option<std::fs::File>,
    out: &mut std::fs::File,
    ca_pem: &str,
) -> std::io::Result<()> {
    use std::io::{Read, Seek, Write};
    let ends_in_newline = match roots {
        // Copied file to file, by the kernel where it can: read in and written out again,
        // the roots were a third of the run's start before nextest.
        Some(mut roots) => match std::io::copy(&mut roots, out)? {
            0 => true,
            _ => {
                let mut last = [0];
                roots.seek(std::io::SeekFrom::End(-1))?;
                roots.read_exact(&mut last)?;
                last == *b"\n"
            }
        },
        None => {
            let mut text = String::new();
            for cert in rustls_native_certs::load_native_certs().certs {
                text.push_str(&pem("CERTIFICATE", cert.as_ref()));
            }
            out.write_all(text.as_bytes())?;
            true
        }
    };
    if !ends_in_newline {
        out.write_all(b"\n")?;
    }
    out.write_all(ca_pem.as_bytes())
}

/// `path` opened, when it is a file that can be read.
fn readable_file(path: &std::path::Path) -> Option<std::fs::File> {
    let file = std::fs::File::open(path).ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

/// The system's bundle file as it is, where it has one and `SSL_CERT_DIR` adds none: the
/// same roots as the store loaded one by one (whose folder mostly links to them again),
/// copied in a tenth of the time, at the start of every run.
fn system_file() -> Option<std::fs::File> {
    if std::env::var_os("SSL_CERT_DIR").is_some() {
        return None;
    }
    readable_file(&openssl_probe::probe().cert_file?)
}

/// DER as PEM, 64 base64 characters a line.
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The realtime SDK's client lost its first request to tickets that came while it wrote.
    #[test]
    fn captured_connections_are_sent_no_session_tickets() {
        let ca = RunCa::new().unwrap();
        assert_eq!(
            ca.server_config("api.openai.com")
                .unwrap()
                .send_tls13_tickets,
            0
        );
    }

    /// A client that trusts the run's CA accepts the leaf of a host named with a trailing dot
    /// and in capitals, as it checks the name without them; one shared configuration serves
    /// two hosts, each its own leaf.
    #[tokio::test]
    async fn leaves_verify_for_their_host_whatever_its_spelling() {
        use rustls::pki_types::pem::PemObject;
        let ca = RunCa::new().unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
            .unwrap();
        let client = Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        );
        for (asked, checked) in [
            ("Tools.Example.", "tools.example"),
            ("api.other.example", "api.other.example"),
        ] {
            let (near, far) = tokio::io::duplex(1 << 16);
            let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config(asked).unwrap());
            let server = tokio::spawn(async move { acceptor.accept(far).await.map(|_| ()) });
            let name = rustls::pki_types::ServerName::try_from(checked)
                .unwrap()
                .to_owned();
            let connected = tokio_rustls::TlsConnector::from(client.clone())
                .connect(name, near)
                .await;
            assert!(connected.is_ok(), "{asked}: {:?}", connected.err());
            server.await.unwrap().unwrap();
        }
        assert_eq!(ca.leaves.lock().unwrap().len(), 2);
    }

    /// The roots copied as they are, a newline added only where their last line lacks one,
    /// then the run's CA.
    #[test]
    fn the_bundle_is_the_roots_then_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
        for (roots, bundle) in [("A\nB", "A\nB\n"), ("A\nB\n", "A\nB\n"), ("", "")] {
            let path = dir.path().join("roots.pem");
            std::fs::write(&path, roots).unwrap();
            let out = dir.path().join("bundle.pem");
            roots_then(
                Some(std::fs::File::open(&path).unwrap()),
                &mut std::fs::File::create(&out).unwrap(),
                ca,
            )
            .unwrap();
            assert_eq!(
                std::fs::read_to_string(&out).unwrap(),
                format!("{bundle}{ca}")
            );
        }
    }
}
