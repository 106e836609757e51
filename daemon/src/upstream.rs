//! The client for real providers, as a developer's other tools reach them: TLS through rustls
//! (ring) trusting the system's certificate store (or `SSL_CERT_FILE` / `SSL_CERT_DIR`), the
//! CA of `[upstream] ca_file`, and the bundled web roots only where the system has none; HTTP(S)
//! proxies from `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (either case) or
//! `[upstream] proxy`, HTTPS through `CONNECT`. Proxy credentials go into the proxy's headers
//! only: never into a cassette, a log line or a message.

use bytes::Bytes;
use http::header::PROXY_AUTHORIZATION;
use http::uri::Scheme;
use http::{Request, Uri};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpStream;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `[upstream]`'s network keys: how to reach the providers.
#[derive(Clone, Debug, Default)]
pub struct Network {
    /// PEM certificates trusted on top of the system's (a company's TLS-inspecting proxy, a
    /// private gateway).
    pub ca_file: Option<PathBuf>,
    /// One proxy for every upstream, instead of the environment's.
    pub proxy: Option<String>,
    /// Hosts reached directly, as `NO_PROXY`; with `proxy` only.
    pub no_proxy: Option<String>,
}

/// Which proxy each upstream goes through, and where that rule comes from.
pub struct Proxies {
    matcher: Matcher,
    source: &'static str,
}

impl std::fmt::Debug for Proxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Matcher's own Debug would print a proxy's credentials.
        f.debug_struct("Proxies")
            .field("source", &self.source)
            .finish()
    }
}

impl Proxies {
    /// `[upstream] proxy` when given, else the environment's variables, as curl reads them.
    pub fn new(network: &Network) -> Result<Proxies, NetworkError> {
        let (given, source) = match &network.proxy {
            Some(p) => (Some(p.clone()), "[upstream] proxy"),
            None => {
                let found = providers::env::PROXY_VARS.iter().find_map(|v| {
                    std::env::var(v)
                        .ok()
                        .filter(|p| !p.is_empty())
                        .map(|p| (p, *v))
                });
                match found {
                    Some((p, var)) => (Some(p), var),
                    None => (None, "environment"),
                }
            }
        };
        if let Some(p) = &given {
            check_proxy(p).map_err(|why| NetworkError::Proxy {
                set_by: source,
                proxy: without_credentials(p),
                why,
            })?;
        }
        let matcher = match &network.proxy {
            Some(p) => {
                let no = network
                    .no_proxy
                    .clone()
                    .or_else(|| {
                        providers::env::NO_PROXY_VARS
                            .iter()
                            .find_map(|v| std::env::var(v).ok())
                    })
                    .unwrap_or_default();
                Matcher::builder().all(p.clone()).no(no).build()
            }
            None => Matcher::from_env(),
        };
        Ok(Proxies { matcher, source })
    }

    fn intercept(&self, uri: &Uri) -> Option<Intercept> {
        self.matcher.intercept(uri)
    }

    /// The proxy requests to `uri` go through, if any, and whether `[upstream] proxy` named it.
    pub fn proxy_for(&self, uri: &Uri) -> Option<(Uri, bool)> {
        self.intercept(uri)
            .map(|p| (p.uri().clone(), self.source == "[upstream] proxy"))
    }

    /// How requests to `url` go, for record modes to print: `direct`, or the proxy (without
    /// its credentials) and where it was set.
    pub fn describe(&self, url: &str) -> String {
        match url.parse::<Uri>().ok().and_then(|u| self.intercept(&u)) {
            Some(p) => format!("through proxy {} ({})", p.uri(), self.source),
            None => "direct".into(),
        }
    }
}

/// A proxy or certificate setting that does not work; each says which and what to give.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// A proxy this client cannot use.
    #[error("{set_by} {proxy}: {why}")]
    Proxy {
        /// Where it was set: `[upstream] proxy`, or the variable.
        set_by: &'static str,
        /// The proxy, without its credentials.
        proxy: String,
        /// What is wrong with it.
        #[source]
        why: ProxyProblem,
    },
    /// `[upstream] ca_file` cannot be read as PEM.
    #[error("[upstream] ca_file {}: {source}", file.display())]
    CaFile {
        /// The file.
        file: std::path::PathBuf,
        /// The PEM reader's error.
        source: rustls::pki_types::pem::Error,
    },
    /// `[upstream] ca_file` holds no certificate.
    #[error("[upstream] ca_file {}: no PEM certificate in it", .0.display())]
    CaFileEmpty(std::path::PathBuf),
    /// `[upstream] ca_file` holds certificates, none of which parses.
    #[error("[upstream] ca_file {}: none of its certificates parses", .0.display())]
    CaFileUnparsable(std::path::PathBuf),
}

/// What is wrong with a proxy's URL.
#[derive(Debug, thiserror::Error)]
pub enum ProxyProblem {
    /// Not a URL at all.
    #[error("not a URL ({0}); e.g. http://proxy.example:3128")]
    NotUrl(#[source] http::uri::InvalidUri),
    /// Not an HTTP proxy.
    #[error("{0} proxies are not supported; give an HTTP proxy, e.g. http://proxy.example:3128")]
    Scheme(String),
    /// No host.
    #[error("names no host; e.g. http://proxy.example:3128")]
    NoHost,
}

/// Only HTTP proxies: HTTPS goes through them with `CONNECT`.
fn check_proxy(proxy: &str) -> Result<(), ProxyProblem> {
    let uri: Uri = proxy.parse().map_err(ProxyProblem::NotUrl)?;
    match uri.scheme_str() {
        None | Some("http") => {}
        Some(other) => return Err(ProxyProblem::Scheme(other.to_string())),
    }
    if uri.host().is_none() {
        return Err(ProxyProblem::NoHost);
    }
    Ok(())
}

/// `proxy` with any `user:password@` taken out, for messages.
pub fn without_credentials(proxy: &str) -> String {
    match proxy.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://{host}"),
            None => proxy.to_string(),
        },
        None => match proxy.split_once('@') {
            Some((_, host)) => host.to_string(),
            None => proxy.to_string(),
        },
    }
}

/// The roots TLS trusts, and what they were made of, for a certificate error to say.
pub struct Roots {
    store: RootCertStore,
    /// Where the roots came from, for messages.
    pub tried: String,
}

impl Roots {
    /// The trusted roots: the system's (or `SSL_CERT_FILE`/`SSL_CERT_DIR`), plus `[upstream] ca_file`.
    pub fn load(network: &Network) -> Result<Roots, NetworkError> {
        let mut store = RootCertStore::empty();
        let mut tried = Vec::new();
        let native = rustls_native_certs::load_native_certs();
        let (added, _) = store.add_parsable_certificates(native.certs);
        let from = match (
            std::env::var_os("SSL_CERT_FILE"),
            std::env::var_os("SSL_CERT_DIR"),
        ) {
            (Some(f), _) => format!("SSL_CERT_FILE={}", f.to_string_lossy()),
            (None, Some(d)) => format!("SSL_CERT_DIR={}", d.to_string_lossy()),
            (None, None) => "the system's certificate store".into(),
        };
        let noun = if added == 1 {
            "certificate"
        } else {
            "certificates"
        };
        tried.push(format!("{from} ({added} {noun})"));
        if added == 0 {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            tried.push("the bundled web roots".into());
        }
        if let Some(file) = &network.ca_file {
            let certs = ca_certificates(file)?;
            let (added, bad) = store.add_parsable_certificates(certs);
            if bad > 0 && added == 0 {
                return Err(NetworkError::CaFileUnparsable(file.clone()));
            }
            tried.push(format!("[upstream] ca_file {}", file.display()));
        }
        Ok(Roots {
            store,
            tried: tried.join(", "),
        })
    }
}

impl Roots {
    /// Fails when `[upstream] ca_file` is given but holds no certificate it can read.
    pub fn check_ca_file(network: &Network) -> Result<(), NetworkError> {
        match &network.ca_file {
            Some(file) => ca_certificates(file).map(|_| ()),
            None => Ok(()),
        }
    }
}

fn ca_certificates(
    file: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, NetworkError> {
    use rustls::pki_types::pem::PemObject;
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| NetworkError::CaFile {
            file: file.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(NetworkError::CaFileEmpty(file.to_path_buf()));
    }
    Ok(certs)
}

/// Sends requests to providers; cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: hyper_util::client::legacy::Client<HttpsConnector<ProxyConnector>, Full<Bytes>>,
    proxies: Arc<Proxies>,
    roots_tried: Arc<str>,
    http: HttpConnector,
    tls: Arc<rustls::ClientConfig>,
}

/// A connection a WebSocket handshake can run over: TCP, or TLS on TCP.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// Why the upstream client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A certificate file or proxy setting that does not work; the message says which.
    #[error(transparent)]
    Network(#[from] NetworkError),
    /// The TLS library refused its own settings.
    #[error("TLS cannot be set up")]
    Tls(#[source] rustls::Error),
}

/// `connect_timeout` bounds how long a provider (or its proxy) may take to accept.
pub fn client(
    connect_timeout: std::time::Duration,
    network: &Network,
) -> Result<Client, ClientError> {
    let roots = Roots::load(network)?;
    let proxies = Arc::new(Proxies::new(network)?);
    let tls = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(ClientError::Tls)?
        .with_root_certificates(roots.store)
        .with_no_client_auth(),
    );
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let connector = ProxyConnector {
        http: http.clone(),
        proxies: proxies.clone(),
    };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Ok(Client {
        inner: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https),
        proxies,
        roots_tried: roots.tried.into(),
        http,
        tls,
    })
}

impl Client {
    /// A connection for a WebSocket session to `host:port`: through the proxy the rules name
    /// for the `https` (`wss`) or `http` (`ws`) scheme, always as a `CONNECT` tunnel, then
    /// TLS when `tls`, with the same roots as every other request.
    pub async fn open(&self, host: &str, port: u16, tls: bool) -> Result<Box<dyn Io>, BoxError> {
        let scheme = if tls { "https" } else { "http" };
        let dst: Uri = format!("{scheme}://{host}:{port}/").parse()?;
        let mut http = self.http.clone();
        let tcp = match self.proxies.intercept(&dst) {
            None => http.call(dst).await?.into_inner(),
            Some(proxy) => {
                let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let io = tunnel.call(dst).await.map_err(|e| -> BoxError {
                    Box::new(ProxyError {
                        proxy: proxy.uri().to_string(),
                        why: tunnel_error(&e),
                    })
                })?;
                io.into_inner()
            }
        };
        if !tls {
            return Ok(Box::new(tcp));
        }
        let name = rustls::pki_types::ServerName::try_from(host.to_string())?;
        let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await?;
        Ok(Box::new(stream))
    }

    /// Sends `request` upstream, through a proxy where one applies.
    pub fn request(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> hyper_util::client::legacy::ResponseFuture {
        // A plain-HTTP upstream behind a proxy is asked through it in absolute form, with the
        // proxy's credentials in this request's headers (HTTPS carries them in CONNECT).
        if request.uri().scheme() == Some(&Scheme::HTTP) {
            if let Some(auth) = self
                .proxies
                .intercept(request.uri())
                .and_then(|p| p.basic_auth().cloned())
            {
                request.headers_mut().insert(PROXY_AUTHORIZATION, auth);
            }
        }
        self.inner.request(request)
    }

    /// What went wrong in words a user can act on, when it is a certificate or a proxy: names
    /// the host, the roots tried and how to add a CA; or the proxy, without credentials.
    pub fn explain(&self, url: &str, error: &(dyn std::error::Error + 'static)) -> Option<String> {
        let host = url
            .parse::<Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string))
            .unwrap_or_else(|| url.to_string());
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(p) = e.downcast_ref::<ProxyError>() {
                return Some(format!(
                    "could not go through the proxy {} to {host}: {}",
                    p.proxy, p.why
                ));
            }
            if let Some(rustls::Error::InvalidCertificate(why)) = e.downcast_ref::<rustls::Error>()
            {
                return Some(format!(
                    "the certificate of {host} is not trusted ({why:?}). Roots tried: {}. If a company proxy or a private gateway signs it, add its CA: [upstream] ca_file = \"path/to/ca.pem\" in llmreplay.toml, or SSL_CERT_FILE=path/to/ca.pem",
                    self.roots_tried
                ));
            }
            // An io::Error hides what it wraps from `source()`: look inside it first.
            next = match e
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
            {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => e.source(),
            };
        }
        None
    }
}

/// A connection failure at the proxy, naming it without credentials.
#[derive(Debug)]
struct ProxyError {
    proxy: String,
    why: String,
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "proxy {}: {}", self.proxy, self.why)
    }
}

impl std::error::Error for ProxyError {}

/// Opens the TCP connection to an upstream: directly, through a `CONNECT` tunnel for HTTPS
/// behind a proxy, or to the proxy itself for plain HTTP (the request then goes in absolute
/// form). TLS, when the upstream is HTTPS, is laid over what this returns.
#[derive(Clone)]
struct ProxyConnector {
    http: HttpConnector,
    proxies: Arc<Proxies>,
}

impl Service<Uri> for ProxyConnector {
    type Response = ProxyStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<ProxyStream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let intercept = self.proxies.intercept(&dst);
        let mut http = self.http.clone();
        Box::pin(async move {
            let Some(proxy) = intercept else {
                let io = http.call(dst).await?;
                return Ok(ProxyStream { io, proxied: false });
            };
            let failed = |why: String| -> BoxError {
                Box::new(ProxyError {
                    proxy: proxy.uri().to_string(),
                    why,
                })
            };
            if dst.scheme() == Some(&Scheme::HTTPS) {
                let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let io = tunnel
                    .call(dst)
                    .await
                    .map_err(|e| failed(tunnel_error(&e)))?;
                Ok(ProxyStream { io, proxied: false })
            } else {
                let io = http
                    .call(proxy.uri().clone())
                    .await
                    .map_err(|e| failed(format!("cannot connect: {e}")))?;
                Ok(ProxyStream { io, proxied: true })
            }
        })
    }
}

fn tunnel_error(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

/// A connection, marked as going to a proxy when requests must be in absolute form.
struct ProxyStream {
    io: TokioIo<TcpStream>,
    proxied: bool,
}

impl Connection for ProxyStream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}

impl hyper::rt::Read for ProxyStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for ProxyStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_shown() {
        assert_eq!(
            without_credentials("http://u:secret@proxy:3128"),
            "http://proxy:3128"
        );
        assert_eq!(without_credentials("u:secret@proxy:3128"), "proxy:3128");
        assert_eq!(
            without_credentials("http://proxy:3128"),
            "http://proxy:3128"
        );
        let p = Proxies::new(&Network {
            proxy: Some("http://u:secret@127.0.0.1:3128".into()),
            no_proxy: Some("internal.example".into()),
            ..Network::default()
        })
        .unwrap();
        let said = p.describe("https://api.openai.com/v1");
        assert_eq!(
            said,
            "through proxy http://127.0.0.1:3128/ ([upstream] proxy)"
        );
        assert!(!format!("{p:?}").contains("secret"));
        assert_eq!(p.describe("https://internal.example/v1"), "direct");
    }

    #[test]
    fn only_http_proxies() {
        assert!(check_proxy("socks5://127.0.0.1:1080")
            .unwrap_err()
            .to_string()
            .contains("socks5"));
        assert!(check_proxy("http://").is_err());
        assert!(check_proxy("127.0.0.1:3128").is_ok());
    }
}
